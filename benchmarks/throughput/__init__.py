"""Speed: train steps, predict calls, exported artifacts, checkpoint loading and whole training
runs, jaxdet alone and against the TF OD API and torchvision (ratios taken in one run)."""
