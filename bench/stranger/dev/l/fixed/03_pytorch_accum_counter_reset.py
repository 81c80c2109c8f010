import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

EPOCHS = 10
BATCH = 32
ACCUM = 2
device = "cuda" if torch.cuda.is_available() else "cpu"

X, y = load_digits(return_X_y=True)
X = X.reshape(-1, 1, 8, 8) / 16.0
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=1, stratify=y)
train_loader = DataLoader(TensorDataset(torch.tensor(X_tr, dtype=torch.float32), torch.tensor(y_tr)),
                          batch_size=BATCH, shuffle=True)
val_loader = DataLoader(TensorDataset(torch.tensor(X_va, dtype=torch.float32), torch.tensor(y_va)),
                        batch_size=256)

model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10),
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()

for epoch in range(EPOCHS):
    model.train()
    running, seen = 0.0, 0
    optimizer.zero_grad()
    step = 0
    for xb, yb in train_loader:
        xb, yb = xb.to(device), yb.to(device)
        loss = criterion(model(xb), yb) / ACCUM
        loss.backward()
        step += 1
        if step % ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()
        running += loss.item() * ACCUM * len(xb)
        seen += len(xb)
    print(f"epoch {epoch}  train_loss {running / seen:.4f}")

model.eval()
correct = total = 0
with torch.no_grad():
    for xb, yb in val_loader:
        pred = model(xb.to(device)).argmax(1)
        correct += (pred == yb.to(device)).sum().item()
        total += len(yb)
print(f"final val_acc {correct / total:.4f}")
