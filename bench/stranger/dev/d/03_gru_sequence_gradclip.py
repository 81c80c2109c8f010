# GRU sequence classifier on a synthetic task: which of 3 frequencies a noisy sine wave has.
# Gradient clipping + ReduceLROnPlateau on val loss.
import numpy as np
import torch
from torch import nn

torch.set_num_threads(1)
torch.manual_seed(42)
rng = np.random.default_rng(42)


def make_data(n, T=30):
    t = np.arange(T)
    cls = rng.integers(0, 3, size=n)
    freqs = np.array([0.1, 0.25, 0.45])[cls]
    phase = rng.uniform(0, 2 * np.pi, size=n)
    sig = np.sin(2 * np.pi * freqs[:, None] * t[None] + phase[:, None])
    sig += 0.4 * rng.standard_normal((n, T))
    return torch.tensor(sig[..., None], dtype=torch.float32), torch.tensor(cls)


x_train, y_train = make_data(2000)
x_val, y_val = make_data(500)


class SeqClassifier(nn.Module):
    def __init__(self, hidden=48):
        super().__init__()
        self.rnn = nn.GRU(1, hidden, batch_first=True, num_layers=1)
        self.head = nn.Linear(hidden, 3)

    def forward(self, x):
        _, h = self.rnn(x)
        return self.head(h[-1])


model = SeqClassifier()
optimizer = torch.optim.RMSprop(model.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=1)
loss_fn = nn.CrossEntropyLoss()

batch_size = 50
for epoch in range(1, 11):
    model.train()
    perm = torch.randperm(len(x_train))
    tot = 0.0
    for start in range(0, len(x_train), batch_size):
        b = perm[start:start + batch_size]
        optimizer.zero_grad()
        loss = loss_fn(model(x_train[b]), y_train[b])
        loss.backward()
        gn = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        tot += loss.item() * len(b)
    model.eval()
    with torch.no_grad():
        out = model(x_val)
        val_loss = loss_fn(out, y_val).item()
        val_acc = (out.argmax(-1) == y_val).float().mean().item()
    scheduler.step(val_loss)
    print(f"epoch {epoch}: train loss {tot/len(x_train):.4f} | val loss {val_loss:.4f} | val acc {val_acc:.3f} | last grad norm {gn:.3f}")

print("final val acc", round(val_acc, 4))
