"""GRU reading 8x8 digit images row by row; a Dataset drops near-blank scans before training."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

torch.manual_seed(5)
np.random.seed(5)


class DigitRows(Dataset):
    """Each image becomes a sequence of 8 rows (8 features each). Scans with too little ink are skipped."""

    def __init__(self, images, labels, min_ink=0.25):
        self.images = images.astype(np.float32) / 16.0
        self.labels = labels.astype(np.int64)
        ink = self.images.mean(axis=(1, 2))
        self.keep = np.flatnonzero(ink >= min_ink)

    def __len__(self):
        return len(self.keep)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[self.keep[i]])
        y = torch.tensor(self.labels[self.keep[i]])
        return x, y


digits = load_digits()
img_tr, img_va, lab_tr, lab_va = train_test_split(digits.images, digits.target, test_size=0.25,
                                                  random_state=5, stratify=digits.target)
train_ds, val_ds = DigitRows(img_tr, lab_tr), DigitRows(img_va, lab_va)
print(f"kept {len(train_ds)}/{len(img_tr)} train and {len(val_ds)}/{len(img_va)} val scans")
train_loader = DataLoader(train_ds, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(5))
val_loader = DataLoader(val_ds, batch_size=128)


class RowGRU(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.gru = nn.GRU(8, hidden, batch_first=True, num_layers=1)
        self.head = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 10))

    def forward(self, x):
        out, h = self.gru(x)
        return self.head(h[-1])


model = RowGRU()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=8, gamma=0.5)

for epoch in range(1, 21):
    model.train()
    tl, tn = 0.0, 0
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tl += loss.item() * len(yb)
        tn += len(yb)
    scheduler.step()
    model.eval()
    vl, correct, vn = 0.0, 0, 0
    with torch.no_grad():
        for xb, yb in val_loader:
            logits = model(xb)
            vl += criterion(logits, yb).item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            vn += len(yb)
    print(f"epoch {epoch:02d} lr {scheduler.get_last_lr()[0]:.5f} train_loss {tl / tn:.4f} "
          f"val_loss {vl / vn:.4f} val_acc {correct / vn:.4f}")

print(f"final val_loss {vl / vn:.4f} val_acc {correct / vn:.4f}")
