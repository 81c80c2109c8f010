import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.manual_seed(123)
np.random.seed(123)
torch.set_num_threads(1)

X, y = make_classification(n_samples=4000, n_features=40, n_informative=15, n_redundant=10,
                           n_classes=4, n_clusters_per_class=2, class_sep=1.2, random_state=123)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=123)
sc = StandardScaler().fit(X_tr)
tr = TensorDataset(torch.tensor(sc.transform(X_tr), dtype=torch.float32), torch.tensor(y_tr))
va = TensorDataset(torch.tensor(sc.transform(X_va), dtype=torch.float32), torch.tensor(y_va))
# memory-limited setting: micro-batches of 16, accumulate 4 -> effective batch 64
micro_loader = DataLoader(tr, batch_size=16, shuffle=True)
val_loader = DataLoader(va, batch_size=512)
ACCUM_STEPS = 4

model = nn.Sequential(nn.Linear(40, 128), nn.GELU(), nn.Dropout(0.1), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
EPOCHS = 12
updates_per_epoch = int(np.ceil(len(micro_loader) / ACCUM_STEPS))
total_updates = EPOCHS * updates_per_epoch
warmup = 50
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: min(1.0, (s + 1) / warmup) * max(0.05, 1 - s / total_updates))
criterion = nn.CrossEntropyLoss()

step = 0
for epoch in range(EPOCHS):
    model.train()
    optimizer.zero_grad()
    ep_loss = 0.0
    for i, (xb, yb) in enumerate(micro_loader):
        loss = criterion(model(xb), yb)
        (loss / ACCUM_STEPS).backward()
        ep_loss += loss.item()
        if (i + 1) % ACCUM_STEPS == 0 or (i + 1) == len(micro_loader):
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
    model.eval()
    with torch.no_grad():
        vl, vc = 0.0, 0
        for xb, yb in val_loader:
            out = model(xb)
            vl += criterion(out, yb).item() * len(yb)
            vc += (out.argmax(1) == yb).sum().item()
    print(f"epoch {epoch+1:2d} updates {step} lr {scheduler.get_last_lr()[0]:.2e} train_loss {ep_loss/len(micro_loader):.4f} val_loss {vl/len(va):.4f} val_acc {vc/len(va):.3f}")
print(f"final val_acc {vc/len(va):.3f}")
