import numpy as np
import torch
from torch import nn
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

torch.set_num_threads(1)
torch.manual_seed(11)
np.random.seed(11)

X, y = load_breast_cancer(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=11, stratify=y)

X_train = torch.tensor(X_train, dtype=torch.float32)
X_test = torch.tensor(X_test, dtype=torch.float32)
y_train = torch.tensor(y_train, dtype=torch.float32)
y_test = torch.tensor(y_test, dtype=torch.float32)

model = nn.Sequential(nn.Linear(30, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.BCEWithLogitsLoss()

for epoch in range(30):
    model.train()
    perm = torch.randperm(len(X_train))
    for i in range(0, len(X_train), 32):
        b = perm[i:i + 32]
        opt.zero_grad()
        loss = loss_fn(model(X_train[b]).squeeze(1), y_train[b])
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        train_loss = loss_fn(model(X_train).squeeze(1), y_train).item()
        logits = model(X_test).squeeze(1)
        test_loss = loss_fn(logits, y_test).item()
        acc = ((logits > 0).float() == y_test).float().mean().item()
    print(f"epoch {epoch+1:2d} train_loss {train_loss:.4f} test_loss {test_loss:.4f} test_acc {acc:.3f}")
print(f"final test_acc {acc:.3f} test_loss {test_loss:.4f}")
