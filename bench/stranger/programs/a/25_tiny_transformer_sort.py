"""A 2-layer Transformer encoder learns to output, at every position, whether the token is larger than the
first token of the sequence. Linear warm-up followed by cosine decay, per optimizer step."""
import math
import torch
import torch.nn as nn

torch.manual_seed(0)
torch.set_num_threads(1)

VOCAB, SEQ, D = 16, 12, 32


def batch(n, gen):
    x = torch.randint(0, VOCAB, (n, SEQ), generator=gen)
    y = (x > x[:, :1]).long()
    return x, y


gen = torch.Generator().manual_seed(1)
Xva, Yva = batch(1000, torch.Generator().manual_seed(999))


class TinyEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(1, SEQ, D) * 0.02)
        layer = nn.TransformerEncoderLayer(D, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2)
        self.cls = nn.Linear(D, 2)

    def forward(self, x):
        return self.cls(self.enc(self.tok(x) + self.pos))


model = TinyEncoder()
STEPS, WARMUP = 600, 60
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)


def lr_lambda(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, STEPS - WARMUP)
    return 0.5 * (1 + math.cos(math.pi * progress))


sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
loss_fn = nn.CrossEntropyLoss()

for step in range(1, STEPS + 1):
    model.train()
    x, y = batch(64, gen)
    logits = model(x)
    loss = loss_fn(logits.reshape(-1, 2), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if step % 100 == 0:
        model.eval()
        with torch.no_grad():
            vl = model(Xva)
            vloss = loss_fn(vl.reshape(-1, 2), Yva.reshape(-1)).item()
            vacc = (vl.argmax(-1) == Yva).float().mean().item()
        print(f"step {step} lr {sched.get_last_lr()[0]:.2e} train_loss {loss.item():.4f} val_loss {vloss:.4f} val_acc {vacc:.3f}")
print(f"final val_acc {vacc:.3f}")
