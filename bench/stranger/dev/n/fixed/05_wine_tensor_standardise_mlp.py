"""Three-cultivar wine classifier: torch-only preprocessing and a small MLP."""
import torch
import torch.nn as nn
from sklearn.datasets import load_wine

SEED = 1
EPOCHS = 40
BATCH = 16


def standardise(train, *others):
    mean = train.mean(dim=0)
    std = train.std(dim=0)
    return [(t - mean) / std for t in (train, *others)]


def accuracy(logits, target):
    return (logits.argmax(dim=-1) == target).float().mean().item()


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    wine = load_wine()
    X = torch.tensor(wine.data, dtype=torch.float32)
    y = torch.tensor(wine.target, dtype=torch.long)

    g = torch.Generator().manual_seed(SEED)
    perm = torch.randperm(len(X), generator=g)
    n_val = 45
    X_val, y_val = X[perm[:n_val]], y[perm[:n_val]]
    X_train, y_train = X[perm[n_val:]], y[perm[n_val:]]

    X_train, X_val = standardise(X_train, X_val)

    model = nn.Sequential(
        nn.Linear(X.shape[1], 64),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(64, 64),
        nn.ReLU(),
        nn.Linear(64, 3),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(EPOCHS):
        model.train()
        order = torch.randperm(len(X_train), generator=g)
        running = 0.0
        for i in range(0, len(order), BATCH):
            idx = order[i:i + BATCH]
            optimizer.zero_grad()
            loss = criterion(model(X_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            running += loss.item() * len(idx)
        train_loss = running / len(X_train)

        if (epoch + 1) % 5 == 0:
            model.eval()
            with torch.no_grad():
                val_logits = model(X_val)
                val_loss = criterion(val_logits, y_val).item()
                val_acc = accuracy(val_logits, y_val)
            print(f"epoch {epoch + 1:3d}  train_loss {train_loss:.4f}  val_loss {val_loss:.4f}  val_acc {val_acc:.4f}")
        else:
            print(f"epoch {epoch + 1:3d}  train_loss {train_loss:.4f}")

    print(f"final val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
