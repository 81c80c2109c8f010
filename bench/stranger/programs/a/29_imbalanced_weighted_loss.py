"""Fraud-style imbalanced binary problem (about 5% positives) handled with pos_weight in BCEWithLogitsLoss;
reports balanced accuracy and minority recall, not just accuracy."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import make_classification
from sklearn.metrics import balanced_accuracy_score, recall_score, f1_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

SEED = 17
np.random.seed(SEED)
torch.manual_seed(SEED)
torch.set_num_threads(1)

X, y = make_classification(n_samples=6000, n_features=20, n_informative=6, weights=[0.95, 0.05],
                           class_sep=1.5, flip_y=0.01, random_state=SEED)
Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.25, stratify=y, random_state=SEED)
sc = StandardScaler().fit(Xtr)
Xtr_t = torch.tensor(sc.transform(Xtr), dtype=torch.float32)
Xva_t = torch.tensor(sc.transform(Xva), dtype=torch.float32)
ytr_t = torch.tensor(ytr, dtype=torch.float32)
print(f"positives in train: {ytr.mean():.3f}")

model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
pos_weight = torch.tensor([(1 - ytr.mean()) / ytr.mean()], dtype=torch.float32)
criterion = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)

for epoch in range(1, 13):
    model.train()
    perm = torch.randperm(len(Xtr_t))
    losses = []
    for i in range(0, len(perm), 128):
        b = perm[i:i + 128]
        opt.zero_grad()
        loss = criterion(model(Xtr_t[b]).squeeze(1), ytr_t[b])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(Xva_t).squeeze(1)
        vloss = criterion(logits, torch.tensor(yva, dtype=torch.float32)).item()
        pred = (logits > 0).long().numpy()
    if epoch % 2 == 0:
        print(f"epoch {epoch} train_loss {np.mean(losses):.4f} val_loss {vloss:.4f} "
              f"bal_acc {balanced_accuracy_score(yva, pred):.3f} minority_recall {recall_score(yva, pred):.3f} "
              f"f1 {f1_score(yva, pred):.3f}")
print(f"final bal_acc {balanced_accuracy_score(yva, pred):.3f} minority_recall {recall_score(yva, pred):.3f}")
