import torch
import torch.nn as nn
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

X, y = make_classification(n_samples=6000, n_features=40, n_informative=20, n_redundant=10,
                           n_classes=4, n_clusters_per_class=2, class_sep=1.2, random_state=3)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=0)
sc = StandardScaler().fit(X_tr)
train_ds = TensorDataset(torch.tensor(sc.transform(X_tr), dtype=torch.float32), torch.tensor(y_tr))
val_ds = TensorDataset(torch.tensor(sc.transform(X_va), dtype=torch.float32), torch.tensor(y_va))

train_loader = DataLoader(train_ds, batch_size=32, shuffle=True)
val_loader = DataLoader(val_ds, batch_size=512)

model = nn.Sequential(nn.Linear(40, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
crit = nn.CrossEntropyLoss()


def evaluate():
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    with torch.no_grad():
        for xb, yb in val_loader:
            out = model(xb)
            loss_sum += crit(out, yb).item() * len(yb)
            correct += (out.argmax(1) == yb).sum().item()
            total += len(yb)
    return loss_sum / total, correct / total


for epoch in range(30):
    model.train()
    tot, n = 0.0, 0
    for xb, yb in train_loader:
        opt.zero_grad()
        loss = crit(model(xb), yb)
        loss.backward()
        opt.step()
        tot += loss.item() * len(yb)
        n += len(yb)
    print(f"epoch {epoch:2d}  train_loss {tot / n:.4f}")

val_loss, val_acc = evaluate()
print(f"final val_loss {val_loss:.4f}  val_acc {val_acc:.4f}")
