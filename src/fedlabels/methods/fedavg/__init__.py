"""The FedAvg family: FedAvg and DP-FedAvg (client-level and record-level)."""
