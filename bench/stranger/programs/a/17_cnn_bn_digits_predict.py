"""CNN with BatchNorm and Dropout on digits; evaluated with a predict() helper."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.metrics import accuracy_score

torch.manual_seed(11)
np.random.seed(11)
torch.set_num_threads(1)

d = load_digits()
X = torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)
y = torch.tensor(d.target)
idx_tr, idx_te = train_test_split(np.arange(len(y)), test_size=0.25, random_state=11, stratify=d.target)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(32 * 16, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def predict(model, images):
    preds = []
    with torch.no_grad():
        for img in images:
            preds.append(model(img.unsqueeze(0)))
    return torch.cat(preds)


model = CNN()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)
loss_fn = nn.CrossEntropyLoss()
Xtr, ytr = X[idx_tr], y[idx_tr]

for epoch in range(10):
    model.train()
    perm = torch.randperm(len(Xtr))
    ep_loss = 0.0
    for i in range(0, len(Xtr), 32):
        b = perm[i:i + 32]
        opt.zero_grad()
        loss = loss_fn(model(Xtr[b]), ytr[b])
        loss.backward()
        opt.step()
        ep_loss += loss.item() * len(b)
    test_logits = predict(model, X[idx_te])
    test_loss = loss_fn(test_logits, y[idx_te]).item()
    acc = accuracy_score(y[idx_te].numpy(), test_logits.argmax(1).numpy())
    print(f"epoch {epoch+1}: train_loss {ep_loss/len(Xtr):.4f} test_loss {test_loss:.4f} test_acc {acc:.3f}")
print(f"final test_loss {test_loss:.4f} test_acc {acc:.3f}")
