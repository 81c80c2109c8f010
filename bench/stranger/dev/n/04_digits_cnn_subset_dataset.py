"""Small 2-D CNN on the scikit-learn 8x8 digits, with a Dataset that adds random shifts."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 0
EPOCHS = 12
BATCH = 64


class DigitsSubset(Dataset):
    """Views a subset of the full image/label arrays given by `indices`."""

    def __init__(self, images, labels, indices, augment=False):
        self.images = torch.as_tensor(images, dtype=torch.float32).unsqueeze(1) / 16.0
        self.labels = torch.as_tensor(labels, dtype=torch.long)
        self.indices = np.asarray(indices)
        self.augment = augment

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        idx = self.indices[i]
        img = self.images[idx]
        if self.augment:
            dy, dx = np.random.randint(-1, 2, size=2)
            img = torch.roll(img, shifts=(int(dy), int(dx)), dims=(1, 2))
        return img, self.labels[i]


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def main():
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    digits = load_digits()
    all_idx = np.arange(len(digits.target))
    train_idx, val_idx = train_test_split(
        all_idx, test_size=0.2, stratify=digits.target, random_state=SEED)

    train_ds = DigitsSubset(digits.images, digits.target, train_idx, augment=True)
    val_ds = DigitsSubset(digits.images, digits.target, val_idx)
    train_loader = DataLoader(train_ds, batch_size=BATCH, shuffle=True)
    val_loader = DataLoader(val_ds, batch_size=256)

    model = DigitsCNN()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)

    for epoch in range(1, EPOCHS + 1):
        model.train()
        epoch_loss, seen = 0.0, 0
        for images, targets in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(images), targets)
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item() * targets.size(0)
            seen += targets.size(0)

        model.eval()
        correct, total = 0, 0
        with torch.no_grad():
            for images, targets in val_loader:
                correct += (model(images).argmax(dim=1) == targets).sum().item()
                total += targets.size(0)
        val_acc = correct / total
        print(f"Epoch {epoch}/{EPOCHS} - loss: {epoch_loss / seen:.4f} - val_accuracy: {val_acc:.4f}")

    print(f"final val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()
