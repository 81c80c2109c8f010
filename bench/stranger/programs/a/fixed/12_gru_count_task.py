"""GRU that learns whether a binary sequence contains more ones in its first half than in its second half."""
import random
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader

random.seed(0)
np.random.seed(0)
torch.manual_seed(0)
torch.set_num_threads(1)

SEQ = 20


class HalvesDataset(Dataset):
    def __init__(self, n):
        self.x = (torch.rand(n, SEQ, 1) < 0.5).float()
        first = self.x[:, : SEQ // 2].sum(dim=(1, 2))
        second = self.x[:, SEQ // 2:].sum(dim=(1, 2))
        self.y = (first > second).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


train_loader = DataLoader(HalvesDataset(3000), batch_size=32, shuffle=True)
val_loader = DataLoader(HalvesDataset(600), batch_size=200)


class GRUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(1, 48, batch_first=True)
        self.out = nn.Linear(48, 2)

    def forward(self, x):
        _, h = self.gru(x)
        return self.out(h.squeeze(0))


model = GRUNet()
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()

for epoch in range(8):
    model.train()
    tot, cnt = 0.0, 0
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        tot += loss.item() * len(y)
        cnt += len(y)
    model.eval()
    vloss, vcorrect, vn = 0.0, 0, 0
    with torch.no_grad():
        for x, y in val_loader:
            logits = model(x)
            vloss += criterion(logits, y).item() * len(y)
            vcorrect += (logits.argmax(-1) == y).sum().item()
            vn += len(y)
    print(f"epoch {epoch}: train_loss={tot/cnt:.4f} val_loss={vloss/vn:.4f} val_acc={vcorrect/vn:.3f}")
print(f"final val_acc={vcorrect/vn:.3f}")
