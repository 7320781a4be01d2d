"""Zoo harness: unet from the installed diffusers, random weights, the library's defaults."""
import torch
import diffusers

CONFIG = {'block_out_channels': (32, 32, 32, 32), 'cross_attention_dim': 32, 'layers_per_block': 2, 'norm_num_groups': 8, 'down_block_types': ('CrossAttnDownBlock2D', 'CrossAttnDownBlock2D', 'CrossAttnDownBlock2D', 'DownBlock2D'), 'up_block_types': ('UpBlock2D', 'CrossAttnUpBlock2D', 'CrossAttnUpBlock2D', 'CrossAttnUpBlock2D'), 'attention_head_dim': 8}


def build_model():
    torch.manual_seed(0)
    model = diffusers.UNet2DConditionModel(**CONFIG)
    return model.eval()


def make_inputs(batch: int = 4, latent: int = 64):
    g = torch.Generator().manual_seed(batch + latent)
    return {"sample": torch.randn(batch, 4, latent, latent, generator=g), "timestep": torch.tensor(10),
            "encoder_hidden_states": torch.randn(batch, 77, CONFIG["cross_attention_dim"], generator=g)}
