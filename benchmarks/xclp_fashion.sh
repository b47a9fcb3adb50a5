#!/usr/bin/env bash
# XCLP vs per-client LP (one-shot) and FedAvg+XCLP vs its baselines on Fashion-MNIST,
# 5 clients x 1,000 private images, 10 % of them labelled. Results: results/xclp/*.json;
# summary table: .venv/bin/python benchmarks/xclp_table.py results/xclp
# These reproduce docs/xclp.md's one-hot tables (Algorithm 1), so they set balance=none (the
# default is class); Fashion-MNIST is not z-scored, so features=raw|federation agree here.
set -euo pipefail
FL=".venv/bin/fedlabels"
OUT=results/xclp
mkdir -p "$OUT"
COMMON="--dataset fashion_mnist --clients 5 --private-per-client 1000 --unlabeled 100 --no-progress"
for seed in 0 1 2; do
  for method in xclp perclient-lp; do
    nice -n 10 $FL run --method $method $COMMON --rounds 1 --lsh-bits 1024 --knn 10 \
      --alpha 0.99 --labeled-fraction 0.1 --opt test_points=400 --opt balance=none \
      --seed $seed \
      --output "$OUT/${method}_seed${seed}.json"
  done
done
[ "${1:-}" = "--one-shot-only" ] && exit 0
for seed in 0 1 2; do
  for prop in cross none local; do
    nice -n 10 $FL run --method fedavg-xclp $COMMON --model 'mlp(hidden=256-128)' \
      --rounds 10 --period 50 --lsh-bits 256 --knn 10 --labeled-fraction 0.1 \
      --opt propagation=$prop --opt warmup_rounds=3 --opt balance=none --seed $seed \
      --output "$OUT/fedavg-xclp-${prop}_seed${seed}.json"
  done
done
