import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.manual_seed(3)
np.random.seed(3)
torch.set_num_threads(1)

X, y = load_digits(return_X_y=True)
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=3)
sc = StandardScaler().fit(Xtr)
Xtr = torch.tensor(sc.transform(Xtr), dtype=torch.float32)
Xte = torch.tensor(sc.transform(Xte), dtype=torch.float32)
ytr, yte = torch.tensor(ytr), torch.tensor(yte)


def mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


model = mlp([64, 256, 256, 256, 256, 256, 10])


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, mean=0.0, std=1.0)
        nn.init.zeros_(m.bias)


model.apply(init_weights)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(30):
    model.train()
    perm = torch.randperm(len(Xtr))
    losses = []
    for i in range(0, len(Xtr), 64):
        b = perm[i:i + 64]
        opt.zero_grad()
        loss = loss_fn(model(Xtr[b]), ytr[b])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(Xte)
        acc = (logits.argmax(1) == yte).float().mean().item()
        vl = loss_fn(logits, yte).item()
    if epoch % 3 == 2:
        print(f"epoch {epoch+1} train_loss {np.mean(losses):.4f} val_loss {vl:.4f} val_acc {acc:.3f}")
print(f"final val_acc {acc:.3f}")
