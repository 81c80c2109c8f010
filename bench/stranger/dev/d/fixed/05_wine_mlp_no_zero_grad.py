import torch
import torch.nn as nn
import numpy as np
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.set_num_threads(1)
torch.manual_seed(3)
np.random.seed(3)

data = load_wine()
X_tr, X_te, y_tr, y_te = train_test_split(data.data, data.target, test_size=0.3, random_state=3, stratify=data.target)
sc = StandardScaler()
X_tr = torch.tensor(sc.fit_transform(X_tr), dtype=torch.float32)
X_te = torch.tensor(sc.transform(X_te), dtype=torch.float32)
y_tr = torch.tensor(y_tr)
y_te = torch.tensor(y_te)

model = nn.Sequential(nn.Linear(13, 32), nn.Tanh(), nn.Linear(32, 3))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = nn.CrossEntropyLoss()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X_tr, y_tr), batch_size=16, shuffle=True)

for epoch in range(40):
    model.train()
    for xb, yb in loader:
        optimizer.zero_grad()
        out = model(xb)
        loss = criterion(out, yb)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        tr_loss = criterion(model(X_tr), y_tr).item()
        te_out = model(X_te)
        te_loss = criterion(te_out, y_te).item()
        te_acc = (te_out.argmax(1) == y_te).float().mean().item()
    if epoch % 5 == 0 or epoch == 39:
        print(f"Epoch {epoch:02d} | train loss {tr_loss:.4f} | test loss {te_loss:.4f} | test acc {te_acc:.3f}")

print(f"Final test accuracy: {te_acc:.3f}  test loss: {te_loss:.4f}")
