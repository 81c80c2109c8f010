"""Small CNN on 8x8 digits; micro-batches of 8 with gradient accumulation to an effective batch of 128."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

torch.manual_seed(3)
np.random.seed(3)

digits = load_digits()
X = (digits.images / 16.0).astype(np.float32)[:, None]       # (N, 1, 8, 8) in [0, 1]
y = digits.target.astype(np.int64)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=3, stratify=y)
mu, sd = X_tr.mean(), X_tr.std()
X_tr, X_va = (X_tr - mu) / sd, (X_va - mu) / sd

train_loader = DataLoader(TensorDataset(torch.from_numpy(X_tr), torch.from_numpy(y_tr)),
                          batch_size=8, shuffle=True, drop_last=True,
                          generator=torch.Generator().manual_seed(3))
val_loader = DataLoader(TensorDataset(torch.from_numpy(X_va), torch.from_numpy(y_va)), batch_size=256)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


model = SmallCNN()
criterion = nn.CrossEntropyLoss()
ACCUM_STEPS = 16                                     # 16 x 8 = effective batch 128
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

for epoch in range(1, 21):
    model.train()
    running, seen = 0.0, 0
    optimizer.zero_grad()
    for i, (xb, yb) in enumerate(train_loader):
        loss = criterion(model(xb), yb)
        (loss / ACCUM_STEPS).backward()
        running += loss.item() * len(yb)
        seen += len(yb)
        if (i + 1) % ACCUM_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    correct, vloss, m = 0, 0.0, 0
    with torch.no_grad():
        for xb, yb in val_loader:
            out = model(xb)
            vloss += criterion(out, yb).item() * len(yb)
            correct += (out.argmax(1) == yb).sum().item()
            m += len(yb)
    print(f"epoch {epoch:02d} train_loss {running / seen:.4f} val_loss {vloss / m:.4f} val_acc {correct / m:.4f}")

print(f"final val_loss {vloss / m:.4f} val_acc {correct / m:.4f}")
