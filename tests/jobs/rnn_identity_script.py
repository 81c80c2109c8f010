"""A plain PyTorch script (it never imports tensortap) whose gradients explode through time: a
ReLU RNN with recurrent weights 1.1 times the identity and zero biases, over 60 time steps, SGD
at an ordinary learning rate (0.01), on a 0/1 task (is the sum of a faint input positive) with
nn.BCEWithLogitsLoss. Batches of 4 hold only 0 targets now and then. Its first update moves the
weights by 0.04-0.11 of their norm; the second explodes (a loss of 1e5), then every ReLU of the
RNN is dead."""

import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
HIDDEN, LENGTH = 16, 60


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(1, HIDDEN, nonlinearity="relu", batch_first=True)
        self.head = nn.Linear(HIDDEN, 1)
        with torch.no_grad():
            for name, param in self.rnn.named_parameters():
                if name == "weight_hh_l0":
                    param.copy_(1.1 * torch.eye(HIDDEN))
                elif name.startswith("bias_"):  # bias_ih_l0, bias_hh_l0
                    param.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1]).squeeze(-1)


generator = torch.Generator().manual_seed(1)
x = 0.02 * torch.randn(512, LENGTH, 1, generator=generator)  # a faint signal
y = (x[:, :, 0].sum(1) > 0).float()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
criterion = nn.BCEWithLogitsLoss()
for step in range(args.steps):
    batch = torch.randint(0, len(y), (4,), generator=generator)
    loss = criterion(model(x[batch]), y[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step}: loss {loss.item():.4g}")
