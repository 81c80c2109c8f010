import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 1
torch.manual_seed(SEED)
np.random.seed(SEED)
torch.set_num_threads(1)

data = load_digits()
images = data.images.astype("float32") / 16.0
xtr, xte, ytr, yte = train_test_split(images, data.target, test_size=0.2, random_state=SEED)
train_ds = TensorDataset(torch.from_numpy(xtr).unsqueeze(1), torch.from_numpy(ytr))
test_ds = TensorDataset(torch.from_numpy(xte).unsqueeze(1), torch.from_numpy(yte))
train_dl = DataLoader(train_ds, batch_size=32, shuffle=True)
test_dl = DataLoader(test_ds, batch_size=256)

net = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Linear(64, 10),
)

opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
# decay the learning rate by half every 5 epochs
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
crit = nn.CrossEntropyLoss()


def evaluate():
    net.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for xb, yb in test_dl:
            out = net(xb)
            loss_sum += crit(out, yb).item() * len(yb)
            correct += (out.argmax(1) == yb).sum().item()
    return loss_sum / len(test_ds), correct / len(test_ds)


for epoch in range(20):
    net.train()
    tl = 0.0
    for xb, yb in train_dl:
        opt.zero_grad()
        loss = crit(net(xb), yb)
        loss.backward()
        opt.step()
        tl += loss.item() * len(yb)
    sched.step()
    vl, va = evaluate()
    print(f"[{epoch+1:02d}] lr={opt.param_groups[0]['lr']:.2e} train_loss={tl/len(train_ds):.4f} test_loss={vl:.4f} test_acc={va:.3f}")
print(f"final test_acc={va:.3f}")
