# Small CNN with BatchNorm on the 8x8 digits, SGD+momentum, StepLR, gradient clipping, tiny noisy batches.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(1)
np.random.seed(1)
torch.set_num_threads(1)

digits = load_digits()
X = digits.images.astype(np.float32) / 16.0  # pixel values are 0..16
X = (X - 0.5) / 0.5
y = digits.target
Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=1)
Xtr, Xte = torch.from_numpy(Xtr).unsqueeze(1), torch.from_numpy(Xte).unsqueeze(1)
ytr, yte = torch.from_numpy(ytr), torch.from_numpy(yte)


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
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
loader = DataLoader(TensorDataset(Xtr, ytr), batch_size=16, shuffle=True,
                    generator=torch.Generator().manual_seed(1))

for epoch in range(10):
    net.train()
    losses = []
    for i, (xb, yb) in enumerate(loader):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(xb), yb)
        loss.backward()
        gn = nn.utils.clip_grad_norm_(net.parameters(), max_norm=2.0)
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    net.eval()
    with torch.no_grad():
        logits = net(Xte)
        vloss = F.cross_entropy(logits, yte).item()
        vacc = (logits.argmax(1) == yte).float().mean().item()
    print(f"[{epoch}] train {np.mean(losses):.4f} | val loss {vloss:.4f} acc {vacc:.3f} | last grad norm {gn:.2f}")

print(f"test accuracy: {vacc:.4f}")
