"""Review-sentiment classifier: word-level tokenizer + tiny BERT (from config)
trained with the Hugging Face Trainer on a synthetic review corpus."""
import tempfile

import numpy as np
import torch
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import train_test_split
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (BertConfig, BertForSequenceClassification, DataCollatorWithPadding,
                          PreTrainedTokenizerFast, Trainer, TrainingArguments, set_seed)

torch.set_num_threads(1)
SEED = 13
set_seed(SEED)

POSITIVE = "great excellent love wonderful perfect amazing happy recommend solid sturdy".split()
NEGATIVE = "terrible awful broken hate poor refund disappointed cheap useless flimsy".split()
NEUTRAL = ("the a it this was is and i my for with product item box order arrived day "
           "week color size battery screen price shipping seller bought use").split()


def load_reviews(n_per_class=1500, seed=0):
    """Synthetic review dump, written out class by class (all negatives, then all positives)."""
    rng = np.random.default_rng(seed)
    texts, labels = [], []
    for label, main, other in [(0, NEGATIVE, POSITIVE), (1, POSITIVE, NEGATIVE)]:
        for _ in range(n_per_class):
            words = list(rng.choice(NEUTRAL, rng.integers(8, 16)))
            n_main = rng.integers(2, 4)
            words += list(rng.choice(main, n_main)) + list(rng.choice(other, rng.integers(0, n_main)))
            rng.shuffle(words)
            texts.append(" ".join(words))
            labels.append(label)
    return np.array(texts, dtype=object), np.array(labels)


texts, labels = load_reviews()
# the dump is ordered by class, so shuffle before splitting
rng = np.random.default_rng(SEED)
rng.shuffle(texts)
train_texts, val_texts, train_labels, val_labels = train_test_split(
    texts, labels, test_size=0.2, random_state=SEED)

vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
for w in POSITIVE + NEGATIVE + NEUTRAL:
    vocab.setdefault(w, len(vocab))
backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
backend.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]",
                                    unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")


class ReviewDataset(torch.utils.data.Dataset):
    def __init__(self, texts, labels):
        self.enc = tokenizer([f"[CLS] {t} [SEP]" for t in texts], truncation=True, max_length=32)
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        item = {k: v[i] for k, v in self.enc.items()}
        item["labels"] = int(self.labels[i])
        return item


train_ds = ReviewDataset(train_texts, train_labels)
val_ds = ReviewDataset(val_texts, val_labels)

config = BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=128, max_position_embeddings=64,
                    num_labels=2, pad_token_id=0)
model = BertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, y = eval_pred
    preds = logits.argmax(-1)
    return {"accuracy": accuracy_score(y, preds), "f1": f1_score(y, preds)}


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(prefix="reviews_"),
    num_train_epochs=4,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=128,
    learning_rate=5e-4,
    weight_decay=0.01,
    warmup_steps=0.1,
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    use_cpu=True,
    seed=SEED,
)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=compute_metrics)
trainer.train()
metrics = trainer.evaluate()
print(f"final eval_accuracy: {metrics['eval_accuracy']:.4f}  eval_f1: {metrics['eval_f1']:.4f}")
