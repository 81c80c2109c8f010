"""Renewal prediction: categorical embeddings + standardised numeric columns, binary head."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

SEED = 8
EPOCHS = 12
BATCH = 128
CARDINALITIES = {"plan": 4, "region": 12, "channel": 5}


def simulate_customers(n, rng):
    cats = np.column_stack([rng.integers(0, c, n) for c in CARDINALITIES.values()])
    tenure_months = rng.gamma(2.0, 12.0, n)
    monthly_spend = rng.lognormal(np.log(40), 0.5, n)
    tickets = rng.poisson(1.5, n).astype(float)
    usage_hours = rng.gamma(3.0, 6.0, n)
    num = np.column_stack([tenure_months, monthly_spend, tickets, usage_hours])

    plan_effect = np.array([-0.8, 0.0, 0.4, 0.9])[cats[:, 0]]
    region_effect = rng.normal(0, 0.6, CARDINALITIES["region"])[cats[:, 1]]
    channel_effect = np.array([0.3, -0.5, 0.0, 0.2, -0.9])[cats[:, 2]]
    logit = (plan_effect + region_effect + channel_effect
             + 0.04 * (tenure_months - 24) - 0.5 * (tickets - 1.5)
             + 0.08 * (usage_hours - 18) - 0.01 * (monthly_spend - 40))
    renewed = (rng.random(n) < 1 / (1 + np.exp(-2.0 * logit))).astype(np.float32)
    return cats.astype(np.int64), num.astype(np.float32), renewed


class CustomerDataset(Dataset):
    def __init__(self, cats, num, target):
        self.cats = torch.from_numpy(cats)
        self.num = torch.from_numpy(num)
        self.target = torch.from_numpy(target)

    def __len__(self):
        return len(self.target)

    def __getitem__(self, i):
        return self.cats[i], self.num[i], self.target[i]


class EmbeddingNet(nn.Module):
    def __init__(self, n_num, emb_dim=6, hidden=64):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, emb_dim) for c in CARDINALITIES.values())
        in_dim = emb_dim * len(CARDINALITIES) + n_num
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, cats, num):
        embedded = [emb(cats[:, j]) for j, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat(embedded + [num], dim=1)).squeeze(1)


def evaluate(model, loader, criterion):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for cats, num, target in loader:
            logits = model(cats, num)
            loss_sum += criterion(logits, target).item() * len(target)
            correct += ((logits > 0).float() == target).sum().item()
            n += len(target)
    return loss_sum / n, correct / n


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)

    cats, num, renewed = simulate_customers(6000, rng)
    (cats_tr, cats_va, num_tr, num_va, y_tr, y_va) = train_test_split(
        cats, num, renewed, test_size=0.2, random_state=SEED, stratify=renewed)

    scaler = StandardScaler().fit(num_tr)
    num_tr = scaler.transform(num_tr).astype(np.float32)
    num_va = scaler.transform(num_va).astype(np.float32)

    train_loader = DataLoader(CustomerDataset(cats_tr, num_tr, y_tr), batch_size=BATCH, shuffle=True)
    val_loader = DataLoader(CustomerDataset(cats_va, num_va, y_va), batch_size=512)

    model = EmbeddingNet(num.shape[1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    criterion = nn.BCEWithLogitsLoss()

    for epoch in range(1, EPOCHS + 1):
        model.train()
        running, seen = 0.0, 0
        for cats_b, num_b, y_b in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(cats_b, num_b), y_b)
            loss.backward()
            optimizer.step()
            running += loss.item() * len(y_b)
            seen += len(y_b)
        val_loss, val_acc = evaluate(model, val_loader, criterion)
        print(f"epoch {epoch:2d} | train_loss {running / seen:.4f} | val_loss {val_loss:.4f} | val_acc {val_acc:.4f}")

    print(f"final val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
