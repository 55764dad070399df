//go:build !faultinject

package node

// faultInjectionBuilt: this binary was built without the faultinject tag,
// as releases are: Config.FaultInjection is refused outside go test.
const faultInjectionBuilt = false
