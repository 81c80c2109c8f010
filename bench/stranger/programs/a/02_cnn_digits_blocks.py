"""Small conv net on sklearn digits, built from a configurable list of conv blocks."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

digits = load_digits()
X = (digits.images / 16.0).astype(np.float32)[:, None]  # (N,1,8,8)
y = digits.target
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
X_tr, X_va = torch.tensor(X_tr), torch.tensor(X_va)
y_tr, y_va = torch.tensor(y_tr), torch.tensor(y_va)


class ConvBlock(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

    def forward(self, x):
        return F.relu(self.conv(x))


class Net(nn.Module):
    def __init__(self, channels=(1, 16, 16, 16), n_classes=10):
        super().__init__()
        self.blocks = [ConvBlock(a, b) for a, b in zip(channels[:-1], channels[1:])]
        self.head = nn.Linear(channels[-1], n_classes)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        x = x.mean(dim=(2, 3))  # global average pooling
        return self.head(x)


model = Net()
n_params = sum(p.numel() for p in model.parameters())
print(f"model has {n_params} trainable parameters")
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
loss_fn = nn.CrossEntropyLoss()
batch_size = 64

for epoch in range(25):
    model.train()
    perm = torch.randperm(len(X_tr))
    running = 0.0
    for i in range(0, len(X_tr), batch_size):
        idx = perm[i:i + batch_size]
        optimizer.zero_grad()
        loss = loss_fn(model(X_tr[idx]), y_tr[idx])
        loss.backward()
        optimizer.step()
        running += loss.item() * len(idx)
    model.eval()
    with torch.no_grad():
        out = model(X_va)
        val_loss = loss_fn(out, y_va).item()
        val_acc = (out.argmax(1) == y_va).float().mean().item()
    if epoch % 5 == 4 or epoch == 0:
        print(f"epoch {epoch+1} loss {running/len(X_tr):.4f} val_loss {val_loss:.4f} val_acc {val_acc:.3f}")
print(f"final val_acc {val_acc:.3f}")
