"""Threat models of xclp, perclient-lp and fedavg-xclp: every value a client sends.

XCLP's protection is cryptographic, not differential privacy, so the declared guarantee is
``none`` (nothing is covered in the DP sense); ``assumptions`` state what the cryptography
hides from a semi-honest server and what the protocol reveals by design (docs/xclp.md).
Per-peer keys are written with a ``{peer}`` placeholder (``to_{peer}`` is ``to_3`` in a
message to or from client 3).
"""

from __future__ import annotations

from fedlabels.method.threat import (
    EVALUATION_PAYLOADS,
    HONEST_BUT_CURIOUS_SERVER,
    Payload,
    ThreatModel,
)

_HAM = "xclp.hamming.reply"

#: what every XCLP participant sends, in message order
XCLP_PAYLOADS = (
    Payload("xclp.setup.reply", "pub", "crypto", note="X25519 public key (secure modes)"),
    Payload("xclp.setup.reply", "commit", "crypto",
            note="SHA-256 commitment to the client's random seed contribution"),
    Payload("xclp.setup.reply", "sig", "crypto",
            note="Ed25519 signature of the site's identity key on its X25519 key and "
                 "commitment, bound to the run id, session and group (sites with a roster)"),
    Payload("xclp.setup.reply", "n", "size", source="config",
            note="number of the client's XCLP points (private and test share)"),
    Payload("xclp.seed.reply", "to_{peer}", "crypto",
            note="seed contribution sealed for one peer (ChaCha20-Poly1305), relayed"),
    Payload(_HAM, "labeled_idx", "indices", rows="own",
            note="which of the client's points are labelled (not their labels); the server "
                 "needs them to solve for the labelled columns S_L"),
    Payload(_HAM, "bits", "lsh-bits", rows="own",
            note="secure=none only: plaintext SimHash bits under a seed the server knows"),
    Payload(_HAM, "H_self", "metric", rows="own",
            note="the client's within-client Hamming matrix (its points against each other), "
                 "in the clear: the diagonal block of H, revealed to the server by design"),
    Payload(_HAM, "enc", "crypto",
            note="Paillier ciphertexts of the key holder's packed, transposed bits"),
    Payload(_HAM, "pk_n", "crypto", note="the key holder's Paillier modulus N (public)"),
    Payload(_HAM, "pk_hs", "crypto", note="the key holder's DJN base h_s (public)"),
    Payload(_HAM, "encsig_{peer}", "crypto",
            note="the key holder's Ed25519 signature on its Paillier key and encrypted bits "
                 "for one evaluator, bound to the run, both ids (sites with a roster)"),
    Payload(_HAM, "res_{peer}", "crypto",
            note="masked, re-randomised ciphertexts under the peer's key, sealed for it "
                 "(ChaCha20-Poly1305), relayed to it"),
    Payload(_HAM, "mask_{peer}", "crypto",
            note="the evaluator's uniform masks R; with the holder's T the server gets the "
                 "pair's Hamming block (T - R)"),
    Payload(_HAM, "T_{peer}", "crypto",
            note="masked Hamming sums (uniform alone); T - R is the pair's Hamming block"),
    Payload(_HAM, "R_{peer}", "crypto",
            note="the OT sender's uniform sums R; T - R is the pair's Hamming block"),
    Payload(_HAM, "to_{peer}", "crypto",
            note="OT messages (base OT, IKNP matrix, corrections) sealed for one peer"),
    Payload("xclp.influence.reply", "ok", "control", source="config"),
    Payload("xclp.rowsums.reply", "part", "crypto",
            note="fixed-point S_L Y_L of the client's labels on the other current "
                 "participants' rows (never a dropped-out client's: there the masks would "
                 "cancel), plus pairwise masks: uniform words in secure modes. secure=none "
                 "sends it unmasked, and the server, which knows S_L, can solve for the labels"),
    Payload("xclp.rowsums.reply", "counts", "crypto",
            note="balance=class only: the client's labelled-point count per class plus a "
                 "mask K_j derived from the agreed LSH seed (unknown to the server): uniform "
                 "words, and their sum stays masked; secure=none sends the counts in the clear"),
)

#: the one-shot methods also report the accuracy of the labels on the unlabelled points
ONE_SHOT_EVALUATION = (
    *EVALUATION_PAYLOADS,
    Payload("evaluate.reply", "unlabeled_accuracy", "metric", source="config",
            note="accuracy on the client's unlabelled private points; outside any guarantee"),
    Payload("evaluate.reply", "fallback", "control", source="config",
            note="whether the client fell back to per-client LP (it dropped out)"),
)

XCLP_ASSUMPTIONS = (
    "no differential privacy: the protection is cryptographic, against a semi-honest "
    "server (clients are semi-honest too); a site that colludes with the server is outside "
    "it",
    "sites with identity keys (Ed25519; the simulator's session builder, or on Flower "
    "the site's own `deploy identity` key and the roster `deploy prepare` writes, give "
    "each site its own key and the roster of client id -> identity public key, out of "
    "band, never through the server): every site signs its X25519 key and "
    "seed commitment and, secure=paillier, its Paillier key and encrypted bits for each "
    "evaluator, bound to the run id, session, group, purpose and both ids; a site refuses "
    "a peer outside its roster and a missing, replayed or wrong signature, so a server "
    "that deviates can neither insert a peer of its own (a Sybil), run a man-in-the-middle, "
    "nor substitute a relayed value; other deviations (say a forged S_L) are not claimed, "
    "nor a server run by whoever made the keys (`deploy prepare` without --identity-public "
    "holds them all); the coordinator that writes the roster is caught where it swaps a "
    "site's own entry (the site refuses) or, for a peer's entry, only by sites that pin "
    "the roster fingerprint they compared with one another (`roster-sha256`), not through "
    "the coordinator",
    "sites without identity keys (roles built without the out-of-band setup, e.g. "
    "through the API with no trust): the keys and ciphertexts the server relays are not "
    "authenticated, so a server that deviates can run a peer of its own or a "
    "man-in-the-middle (every labelled point's label of the victim) and swap the Paillier "
    "ciphertexts it relays (every LSH bit of the evaluator); there the guarantee holds "
    "only against a server that relays messages faithfully",
    "secure=ot|paillier: the server learns no features, labels, LSH bits or LSH seed (the "
    "seed is agreed by commit-then-reveal, sealed per pair); SecureHamming gives it exactly "
    "the Hamming distances, SecureRowSums only uniformly masked words; a client learns its "
    "own rows of Z and the columns S_L of its labelled points",
    "revealed by design: the full Hamming matrix H (the graph; with L, the approximate "
    "cosine similarity of every pair of points across clients), each client's number of "
    "points and which of them are labelled; H_self, the within-client block, is sent in "
    "the clear",
    "cryptography: X25519 + HKDF-SHA256 + ChaCha20-Poly1305 channels; Paillier with keys of "
    ">= 2048 bits (smaller only with insecure_small_keys, tests), DJN short-exponent "
    "encryption (DCR) and statistically hiding re-randomisation (|N| + 128-bit exponents) "
    "(secure=paillier); Chou-Orlandi base OTs (CDH in the "
    "RFC 3526 group, random oracle) and IKNP extension with a fixed-key-AES "
    "correlation-robust hash (secure=ot); semi-honest security only",
    "balance=class: every participant learns the participants' total labelled count per "
    "class (needed to balance the label matrix); the server learns nothing of it in secure "
    "modes",
    "client groups (group_size): each group is a separate XCLP run; the server learns which "
    "clients it grouped, and nothing crosses groups",
    "secure=none is a plaintext baseline: the server can approximately invert the LSH bits "
    "and recover each client's labels from its unmasked S_L Y_L",
)

XCLP_THREAT = ThreatModel(
    view="xclp-secure-hamming",
    adversary=HONEST_BUT_CURIOUS_SERVER,
    sees="secure=ot|paillier: public keys, seed commitments, sealed peer messages, Paillier "
         "ciphertexts and masked shares that combine into the Hamming matrix H of all "
         "points (hence the kNN graph and S_L), each client's point count and labelled "
         "indices, masked row sums. secure=none: plaintext LSH bits and unmasked S_L Y_L",
    guarantee="none",
    assumptions=XCLP_ASSUMPTIONS,
    payloads=(*XCLP_PAYLOADS, *ONE_SHOT_EVALUATION))

PERCLIENT_LP_THREAT = ThreatModel(
    view="nothing-sent", adversary=HONEST_BUT_CURIOUS_SERVER,
    sees="nothing derived from private data (one control message starts the local run)",
    guarantee="none", payloads=ONE_SHOT_EVALUATION)

FEDAVG_XCLP_THREAT = ThreatModel(
    view="parameters",
    adversary=HONEST_BUT_CURIOUS_SERVER,
    sees="each sampled client's model parameters after its local training, every round; "
         "in rounds with propagation=cross also everything XCLP reveals (see xclp), "
         "computed on the network's hidden features of the client's private data",
    guarantee="none",
    assumptions=("no protection of the parameters (as FedAvg)", *XCLP_ASSUMPTIONS),
    payloads=(*XCLP_PAYLOADS,
              Payload("fxclp.weights", "weights", "weights"),
              Payload("fxclp.weights", "n", "size", source="config"),
              *EVALUATION_PAYLOADS))
