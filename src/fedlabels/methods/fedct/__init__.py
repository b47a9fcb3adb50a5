"""FedCT (federated co-training) and DP-FedCT with its label mechanisms."""
