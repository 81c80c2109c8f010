import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)

# standardise each pixel with the training statistics
mu = X_train.mean(axis=0)
sigma = X_train.std(axis=0) + 1e-8
X_train = (X_train - mu) / sigma
X_test = (X_test - mu) / sigma

X_train = torch.tensor(X_train, dtype=torch.float32)
X_test = torch.tensor(X_test, dtype=torch.float32)
y_train = torch.tensor(y_train)
y_test = torch.tensor(y_test)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


model = MLP()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)

for epoch in range(15):
    model.train()
    perm = torch.randperm(len(X_train))
    losses = []
    for i in range(0, len(perm), 50):
        b = perm[i:i + 50]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(X_train[b]), y_train[b])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        logits = model(X_test)
        test_loss = F.cross_entropy(logits, y_test).item()
        test_acc = (logits.argmax(1) == y_test).float().mean().item()
    print(f"epoch {epoch+1:2d} train_loss {np.mean(losses):.4f} test_loss {test_loss:.4f} test_acc {test_acc:.3f}")
print(f"final test_acc {test_acc:.3f}")
