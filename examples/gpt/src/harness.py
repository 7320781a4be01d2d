"""Harness for the bundled example: how diagnose and validate build and feed the model."""

import torch

from model import GPT


def build_model():
    return GPT()


def make_inputs(batch: int = 4, seq: int = 128):
    return (torch.randint(0, 512, (batch, seq)),)
