"""nanoGPT's training loop on characters, ported to threadgrad.

Original: karpathy/nanoGPT, ``train.py`` with ``config/train_shakespeare_char.py`` (MIT), the
single-process CPU path of its README ("--device=cpu --compile=False"), and the sampling of
``sample.py``. Kept as written: the config values, ``get_batch`` (``randint``, ``stack`` of
``from_numpy`` slices), ``estimate_loss``, ``get_lr`` (linear warmup, cosine decay) set into
every param group, ``configure_optimizers``' AdamW groups, ``clip_grad_norm_``,
``zero_grad(set_to_none=True)``, and ``generate(temperature=0.8, top_k=200)``.

Changed: the import lines (``torch`` -> ``threadgrad``); the data: ``data/shakespeare_char``'s
``prepare.py`` downloads tiny-shakespeare, here the same character encoding (sorted unique
characters, 90/10 split, uint16 ids) is made in memory from Python's own help text
(``pydoc_data.topics``); and what the CPU path does not run is left out: DDP, wandb,
checkpoint saving, ``torch.compile``, the autocast context and the GradScaler (disabled for
float32, where ``scaler.scale(loss).backward()``, ``unscale_`` and ``scaler.step(optimizer)``
are ``loss.backward()`` and ``optimizer.step()``, written so here), MFU estimates.
"""
import math
import time

import numpy as np
import threadgrad as torch

from nanogpt_model import GPTConfig, GPT

# config/train_shakespeare_char.py
eval_interval = 250 # keep frequent because we'll overfit
eval_iters = 200
log_interval = 10 # don't print too too often
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256 # context of up to 256 previous characters
n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2
learning_rate = 1e-3 # with baby networks can afford to go a bit higher
max_iters = 5000
lr_decay_iters = 5000 # make equal to max_iters usually
min_lr = 1e-4 # learning_rate / 10 usually
beta2 = 0.99 # make a bit bigger because number of tokens per iter is small
warmup_iters = 100 # not super necessary potentially
# train.py's defaults that the config keeps
weight_decay = 1e-1
beta1 = 0.9
grad_clip = 1.0 # clip gradients at this value, or disable if == 0.0
decay_lr = True # whether to decay the learning rate
bias = False # do we use bias inside LayerNorm and Linear layers?
device = 'cpu'
device_type = 'cpu'
seed_offset = 0
max_new_tokens = 500 # sample.py
temperature = 0.8
top_k = 200

torch.manual_seed(1337 + seed_offset)

# data (replaces data/shakespeare_char/prepare.py's download: text that ships with Python)
from pydoc_data.topics import topics
text = "\n".join(topics[k] for k in sorted(topics))[:200_000]
chars = sorted(list(set(text)))
meta_vocab_size = len(chars)
stoi = { ch:i for i,ch in enumerate(chars) }
itos = { i:ch for i,ch in enumerate(chars) }
encode = lambda s: [stoi[c] for c in s]
decode = lambda l: ''.join([itos[i] for i in l])
n = len(text)
train_ids = np.array(encode(text[:int(n*0.9)]), dtype=np.uint16)
val_ids = np.array(encode(text[int(n*0.9):]), dtype=np.uint16)

def get_batch(split):
    data = train_ids if split == 'train' else val_ids
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
    x, y = x.to(device), y.to(device)
    return x, y

iter_num = 0
best_val_loss = 1e9

# model init
model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                  bias=bias, vocab_size=None, dropout=dropout) # start with model_args from command line
print("Initializing a new model from scratch")
model_args['vocab_size'] = meta_vocab_size if meta_vocab_size is not None else 50304
gptconf = GPTConfig(**model_args)
model = GPT(gptconf)
model.to(device)

# optimizer
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)

# helps estimate an arbitrarily accurate loss over either split using many batches
@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out

# learning rate decay scheduler (cosine with warmup)
def get_lr(it):
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)

# training loop
X, Y = get_batch('train') # fetch the very first batch
t0 = time.time()
while True:

    # determine and set the learning rate for this iteration
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr

    # evaluate the loss on train/val sets
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")

    # forward backward update, with optional gradient accumulation to simulate larger batch size
    for micro_step in range(gradient_accumulation_steps):
        logits, loss = model(X, Y)
        loss = loss / gradient_accumulation_steps # scale the loss to account for gradient accumulation
        # immediately async prefetch next batch while model is doing the forward pass on the GPU
        X, Y = get_batch('train')
        # backward pass
        loss.backward()
    # clip the gradient
    if grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    # step the optimizer
    optimizer.step()
    # flush the gradients as soon as we can, no need for this memory anymore
    optimizer.zero_grad(set_to_none=True)

    # timing and logging
    t1 = time.time()
    dt = t1 - t0
    t0 = t1
    if iter_num % log_interval == 0:
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms")
    iter_num += 1

    # termination conditions
    if iter_num > max_iters:
        break

# sample.py: generate from the trained model
start_ids = encode("\n")
x = (torch.tensor(start_ids, dtype=torch.long, device=device)[None, ...])
with torch.no_grad():
    y = model.generate(x, max_new_tokens, temperature=temperature, top_k=top_k)
    print(decode(y[0].tolist()))
    print('---------------')
