//go:build faultinject

package node

// faultInjectionBuilt: this binary was built with the faultinject tag, for
// tests (cluster-test builds cmd/node so): Config.FaultInjection may be set.
const faultInjectionBuilt = true
