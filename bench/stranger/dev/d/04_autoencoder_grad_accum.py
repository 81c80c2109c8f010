"""Denoising autoencoder on sklearn digits with gradient accumulation (micro-batches of 16, effective batch 64)."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

torch.set_num_threads(1)
torch.manual_seed(7)
np.random.seed(7)

X = load_digits().data.astype(np.float32) / 16.0
idx = np.random.permutation(len(X))
X_train = torch.from_numpy(X[idx[:1400]])
X_val = torch.from_numpy(X[idx[1400:]])

encoder = nn.Sequential(nn.Linear(64, 48), nn.ELU(), nn.Linear(48, 12))
decoder = nn.Sequential(nn.Linear(12, 48), nn.ELU(), nn.Linear(48, 64), nn.Sigmoid())
params = list(encoder.parameters()) + list(decoder.parameters())
opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=1e-4)
mse = nn.MSELoss()

micro_bs, accum_steps = 16, 4
n_epochs = 25
for epoch in range(n_epochs):
    encoder.train(); decoder.train()
    perm = torch.randperm(len(X_train))
    opt.zero_grad()
    epoch_loss, n_micro = 0.0, 0
    for k, i in enumerate(range(0, len(X_train), micro_bs)):
        xb = X_train[perm[i:i + micro_bs]]
        noisy = (xb + 0.1 * torch.randn_like(xb)).clamp(0, 1)
        recon = decoder(encoder(noisy))
        loss = mse(recon, xb)
        (loss / accum_steps).backward()
        epoch_loss += loss.item(); n_micro += 1
        if (k + 1) % accum_steps == 0:
            opt.step()
            opt.zero_grad()
    if n_micro % accum_steps:
        opt.step(); opt.zero_grad()
    encoder.eval(); decoder.eval()
    with torch.no_grad():
        val = mse(decoder(encoder(X_val)), X_val).item()
    if epoch % 5 == 4 or epoch == 0:
        print(f"epoch {epoch+1:3d} train_mse {epoch_loss/n_micro:.5f} val_mse {val:.5f}")

baseline = mse(X_val.mean(0, keepdim=True).expand_as(X_val), X_val).item()
print(f"final val_mse {val:.5f} (predict-the-mean baseline {baseline:.5f})")
