#!/usr/bin/env bash
# The audit of the best FedCT and DP-FedCT configurations of docs/beyond_paper.md (digits,
# seed 0): VUL with its 95 % interval under forged-u and fixed-u, and the canary lower bound
# for DP-FedCT. From the repository root: bash benchmarks/audit_beyond_paper.sh (about
# 8 minutes on 2 cores). Results: results/audit_beyond_paper/*.json
set -euo pipefail
out=results/audit_beyond_paper
mkdir -p "$out"
common=(--dataset digits --clients 5 --model 'mlp(hidden=128)' --rounds 20 --period 50
        --eval-every 20 --seed 0)
fl() { .venv/bin/fedlabels --threads 1 audit "$@"; }
for threat in forged-u fixed-u; do
  fl --method fedct "${common[@]}" --threat "$threat" --output "$out/fedct_$threat.json"
  fl --method fedct "${common[@]}" --threat "$threat" --opt warmup_steps=200 \
     --output "$out/fedct_warmup200_$threat.json"
done
# DP-FedCT's best configuration on digits (docs/beyond_paper.md, goal 4: filtered+self0.95)
fl --method dp-fedct "${common[@]}" --threat forged-u --epsilon 8 \
   --opt example_rate=0.25 --opt example_clip=1.0 --opt mechanism=dpsgd \
   --opt site_model=private --opt quorum=0.8 --opt pseudo_filter=agree \
   --opt own_confidence=0.95 --canaries 100 \
   --output "$out/dpfedct_filtered_self095_forged-u.json"
# ... with the DP-SGD labeller's learning rate tuned for ε = 8 (labeller_lr=0.01): what is
# sent changes (the labels of a better DP model), so it is audited again
for threat in forged-u fixed-u; do
  extra=(); [ "$threat" = forged-u ] && extra=(--canaries 100)
  fl --method dp-fedct "${common[@]}" --threat "$threat" --epsilon 8 \
     --opt example_rate=0.25 --opt example_clip=1.0 --opt mechanism=dpsgd \
     --opt site_model=private --opt quorum=0.8 --opt pseudo_filter=agree \
     --opt own_confidence=0.95 --opt labeller_lr=0.01 "${extra[@]}" \
     --output "$out/dpfedct_filtered_self095_lr001_$threat.json"
done
# the tuned peer: record-level DP-FedAvg with the same learning rate (U plays no role for it)
fl --method dp-fedavg "${common[@]/mlp(hidden=128)/mlp(hidden=128,lr=0.01)}" --threat forged-u \
   --epsilon 8 --opt example_rate=0.25 --opt example_clip=1.0 --opt level=record \
   --canaries 100 --output "$out/dpfedavg_record_lr001_forged-u.json"
