"""One rank of a Hugging Face Trainer under DDP (gloo, two CPU processes started by the test
with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), logging at every step with
gradient accumulation; each rank writes the Trainer's ``log_history`` to
``OUT_DIR/log_history_<rank>.json``. Usage: hf_ddp.py OUT_DIR"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers

import torch
from huggingface_trainer import Counting
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

import tensortap as tt
from tensortap.huggingface import TensortapCallback
from tests.helpers.ranks import leave_together


def main() -> None:
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    config.eos_token_id = config.bos_token_id = None
    args = TrainingArguments(
        sys.argv[1],
        max_steps=3,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        ddp_backend="gloo",
        disable_tqdm=True,
    )
    callback = TensortapCallback(
        include_collections=["losses", "gradients"], save_config=tt.SaveConfig(save_interval=1)
    )
    trainer = Trainer(
        GPT2LMHeadModel(config), args, train_dataset=Counting(64, 0), callbacks=[callback]
    )
    trainer.train()
    history = Path(sys.argv[1]) / f"log_history_{os.environ['RANK']}.json"
    history.write_text(json.dumps(trainer.state.log_history))
    print("rank done", flush=True)
    leave_together()


if __name__ == "__main__":
    main()
