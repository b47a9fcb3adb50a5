"""Operating a Flower deployment: the local launcher, process supervision, TLS, the Fleet
proxy and the site's pinned executor."""
