"""House-price regression with a small feature-tokenising transformer (FT-Transformer style)."""
import numpy as np
import torch
import torch.nn as nn

SEED = 2024
EPOCHS = 20
BATCH = 64
D_MODEL = 32

COLUMNS = ["sqft", "lot_sqft", "year_built", "bedrooms", "bathrooms",
           "dist_centre_km", "latitude", "longitude", "school_rating", "crime_per_1000"]


def make_listings(n, rng):
    sqft = rng.normal(1800, 550, n).clip(500, None)
    lot = rng.lognormal(np.log(7000), 0.4, n)
    year = rng.integers(1920, 2022, n).astype(float)
    beds = np.clip(np.round(sqft / 600 + rng.normal(0, 0.7, n)), 1, 7)
    baths = np.clip(np.round(beds * 0.6 + rng.normal(0, 0.5, n)) / 1.0, 1, 5)
    lat = 47.60 + rng.normal(0, 0.08, n)
    lon = -122.30 + rng.normal(0, 0.08, n)
    dist = np.hypot((lat - 47.61) * 111, (lon + 122.33) * 75)
    school = np.clip(rng.normal(6, 2, n), 1, 10)
    crime = np.clip(rng.normal(25, 8, n) + 0.5 * dist, 2, None)

    neighbourhood = 90 * np.sin((lat - 47.60) * 40) * np.cos((lon + 122.30) * 30)
    price_k = (
        150
        + 0.22 * sqft
        + 0.004 * lot
        + 1.2 * (year - 1970)
        + 15 * baths
        - 6 * dist
        + 18 * school
        - 2.5 * crime
        + neighbourhood
        + rng.normal(0, 25, n)
    )
    X = np.column_stack([sqft, lot, year, beds, baths, dist, lat, lon, school, crime])
    return X.astype(np.float32), price_k.astype(np.float32)


class FeatureTokenizer(nn.Module):
    def __init__(self, n_features, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_features, d) / d ** 0.5)
        self.bias = nn.Parameter(torch.zeros(n_features, d))
        self.cls = nn.Parameter(torch.zeros(1, 1, d))

    def forward(self, x):
        tokens = x.unsqueeze(-1) * self.weight + self.bias
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1)


class FTTransformer(nn.Module):
    def __init__(self, n_features, d=D_MODEL, heads=4, layers=2):
        super().__init__()
        self.tokenizer = FeatureTokenizer(n_features, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, 1))

    def forward(self, x):
        h = self.encoder(self.tokenizer(x))
        return self.head(h[:, 0]).squeeze(-1)


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)

    X, price = make_listings(3000, rng)
    idx = rng.permutation(len(X))
    tr, va = idx[:2400], idx[2400:]

    x_mu, x_sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    y_mu, y_sd = price[tr].mean(), price[tr].std()
    X_train = torch.tensor((X[tr] - x_mu) / x_sd)
    X_val = torch.tensor((X[va] - x_mu) / x_sd)
    y_train = torch.tensor((price[tr] - y_mu) / y_sd)
    y_val = torch.tensor((price[va] - y_mu) / y_sd)

    model = FTTransformer(X.shape[1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
    loss_fn = nn.MSELoss()

    for epoch in range(1, EPOCHS + 1):
        model.train()
        perm = torch.randperm(len(X_train))
        losses = []
        for i in range(0, len(perm), BATCH):
            b = perm[i:i + BATCH]
            optimizer.zero_grad()
            loss = loss_fn(model(X_train[b]), y_train[b])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())

        model.eval()
        with torch.no_grad():
            pred = model(X_val)
        val_mse = loss_fn(pred, y_val).item()
        val_r2 = 1 - val_mse / torch.var(y_val, unbiased=False).item()
        rmse_k = (val_mse ** 0.5) * y_sd
        print(f"epoch {epoch:2d} | train_loss {np.mean(losses):.4f} | val_mse {val_mse:.4f} "
              f"| val_r2 {val_r2:.4f} | val_rmse ${rmse_k:.1f}k")

    print(f"final val_r2 {val_r2:.4f} val_mse {val_mse:.4f}")


if __name__ == "__main__":
    main()
