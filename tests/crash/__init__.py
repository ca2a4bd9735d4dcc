"""The crash tiers: processes killed, power cut on a loop-mounted ext4, damage, interrupted repairs."""
