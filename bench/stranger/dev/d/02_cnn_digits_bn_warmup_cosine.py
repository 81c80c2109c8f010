"""Small CNN with BatchNorm on the 8x8 sklearn digits; SGD+momentum, linear warm-up then cosine decay (per step)."""
import math
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

torch.set_num_threads(1)
torch.manual_seed(1)
np.random.seed(1)

digits = load_digits()
X = (digits.images / 16.0).astype(np.float32)[:, None]  # N,1,8,8 in [0,1]
y = digits.target
Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.25, random_state=1)
mean, std = Xtr.mean(), Xtr.std()
Xtr = torch.tensor((Xtr - mean) / std)
Xva = torch.tensor((Xva - mean) / std)
ytr = torch.tensor(ytr)
yva = torch.tensor(yva)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 3, padding=1)
        self.b1 = nn.BatchNorm2d(16)
        self.c2 = nn.Conv2d(16, 32, 3, padding=1)
        self.b2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.max_pool2d(F.relu(self.b2(self.c2(x))), 2)
        return self.fc(x.flatten(1))


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
epochs, bs = 12, 32
steps_per_epoch = math.ceil(len(Xtr) / bs)
total = epochs * steps_per_epoch
warmup = steps_per_epoch


def lr_lambda(step):
    if step < warmup:
        return (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1 + math.cos(math.pi * p))


sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
g = torch.Generator().manual_seed(1)

for ep in range(epochs):
    net.train()
    perm = torch.randperm(len(Xtr), generator=g)
    losses = []
    for i in range(0, len(Xtr), bs):
        idx = perm[i:i + bs]
        out = net(Xtr[idx])
        loss = F.cross_entropy(out, ytr[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    net.eval()
    with torch.no_grad():
        logits = net(Xva)
        vloss = F.cross_entropy(logits, yva).item()
        vacc = (logits.argmax(1) == yva).float().mean().item()
    print(f"[{ep+1}/{epochs}] lr={sched.get_last_lr()[0]:.5f} train_loss={np.mean(losses):.4f} val_loss={vloss:.4f} val_acc={vacc:.4f}")

print(f"final val_acc={vacc:.4f}")
