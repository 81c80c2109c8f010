"""GRU sequence classifier on a synthetic task, with gradient accumulation (4 micro-batches per step)."""
import numpy as np
import torch
from torch import nn

torch.manual_seed(3)
torch.set_num_threads(1)
rng = np.random.default_rng(3)


def make_data(n, T=20):
    # label: does the running sum of channel 0 finish above the running sum of channel 1?
    x = rng.normal(size=(n, T, 3)).astype(np.float32)
    y = (x[:, :, 0].sum(1) > x[:, :, 1].sum(1)).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


x_train, y_train = make_data(3000)
x_val, y_val = make_data(600)


class GRUClassifier(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.gru = nn.GRU(3, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x):
        _, h = self.gru(x)
        return self.head(h[-1])


model = GRUClassifier()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
loss_fn = nn.CrossEntropyLoss()
micro_bs, accum = 16, 4
n_epochs = 8

step = 0
for epoch in range(n_epochs):
    model.train()
    perm = torch.randperm(len(x_train))
    optimizer.zero_grad()
    epoch_loss, nb = 0.0, 0
    for i in range(0, len(perm), micro_bs):
        idx = perm[i:i + micro_bs]
        loss = loss_fn(model(x_train[idx]), y_train[idx])
        (loss / accum).backward()
        epoch_loss += loss.item()
        nb += 1
        if nb % accum == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
    model.eval()
    with torch.no_grad():
        out = model(x_val)
        val_loss = loss_fn(out, y_val).item()
        val_acc = (out.argmax(-1) == y_val).float().mean().item()
    print(f"epoch {epoch} steps {step} train_loss {epoch_loss/nb:.4f} val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
print("done. best-effort final val_acc =", round(val_acc, 4))
