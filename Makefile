# The few targets a newcomer needs. Each calls the script the README names.
.PHONY: run test bench lint fmt

run:   ## Run the node on config/default.toml
	scripts/run

test:  ## Every test (installs what it needs)
	scripts/test

bench: ## Throughput and latency figures, as ratios against raw baselines
	scripts/deps
	scripts/tansu
	cargo bench --bench commit
	cargo bench --bench publish
	cargo bench --bench replica
	cargo bench --bench retention
	cargo bench --bench verify
	cargo bench --bench load
	cargo bench --bench store
	cargo bench --bench watch
	cargo bench --bench audit

lint:  ## Formatting, cargo deny and clippy, as CI wants them
	cargo fmt --all -- --check
	scripts/deny
	cargo clippy --workspace --all-targets --all-features -- -D warnings

fmt:
	cargo fmt --all
