"""Data-parallel training of a linear model on synthetic data: every rank
draws its own batches, kolo averages the gradients, and every rank ends
with the same weights."""
import torch

import kolo.torch as hvd

hvd.init()
torch.manual_seed(hvd.rank())  # different data (and initial weights) per rank
device = torch.device("cuda", hvd.local_rank()) if torch.cuda.is_available() else "cpu"

model = torch.nn.Linear(8, 1).to(device)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # rank 0's weights everywhere
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

truth = torch.arange(1.0, 9.0, device=device)
for step in range(50):
    x = torch.randn(32, 8, device=device)
    y = (x @ truth).unsqueeze(1)
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()  # gradients are averaged across ranks while backward runs
    optimizer.step()
    if step % 10 == 0 and hvd.rank() == 0:
        print("step %d loss %.4f" % (step, loss.item()))

# The same weights on every rank: the largest difference from rank 0's is 0.
w = model.weight.detach().flatten()
diff = (w - hvd.broadcast(w, root_rank=0)).abs().max().item()
print("rank %d of %d: weights differ from rank 0's by %g" % (hvd.rank(), hvd.size(), diff))
hvd.shutdown()
assert diff == 0.0
