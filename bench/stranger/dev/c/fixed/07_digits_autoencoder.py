# Undercomplete autoencoder for 8x8 digits (64 -> 8 -> 64), RMSprop, reconstruction MSE on a held-out split.
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

torch.manual_seed(7)
np.random.seed(7)
torch.set_num_threads(1)

X = load_digits().data.astype(np.float32) / 16.0
X_tr, X_va = train_test_split(X, test_size=0.2, random_state=7)
X_tr, X_va = torch.from_numpy(X_tr), torch.from_numpy(X_va)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ELU(), nn.Linear(128, 32), nn.ELU(), nn.Linear(32, 8))

    def forward(self, x):
        return self.net(x)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ELU(), nn.Linear(32, 128), nn.ELU(), nn.Linear(128, 64),
                                 nn.Sigmoid())

    def forward(self, z):
        return self.net(z)


encoder, decoder = Encoder(), Decoder()
optimizer = torch.optim.RMSprop(list(encoder.parameters()) + list(decoder.parameters()), lr=1e-3)
loss_fn = nn.MSELoss()

bs = 32
for epoch in range(1, 26):
    encoder.train(); decoder.train()
    perm = torch.randperm(len(X_tr))
    losses = []
    for i in range(0, len(X_tr), bs):
        xb = X_tr[perm[i:i + bs]]
        recon = decoder(encoder(xb))
        loss = loss_fn(recon, xb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    encoder.eval(); decoder.eval()
    with torch.no_grad():
        val = loss_fn(decoder(encoder(X_va)), X_va).item()
    if epoch % 5 == 0 or epoch == 1:
        print(f"epoch {epoch:2d} train_recon_mse {np.mean(losses):.5f} val_recon_mse {val:.5f}")
print(f"final val reconstruction MSE: {val:.5f}")
