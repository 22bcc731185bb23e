//go:build !troupecuda

package device_test

import (
	"fmt"

	"github.com/troupe-ml/troupe/device"
)

// A command passes its --device flag to Select once, at start-up.
func ExampleSelect() {
	if err := device.Select("cpu"); err != nil {
		fmt.Println(err)
	}
	fmt.Println(device.Selected(), device.Engine() == nil)
	// In this build (no -tags troupecuda) "cuda" is refused.
	fmt.Println(device.Select("cuda") != nil, device.Selected())
	// Output:
	// cpu true
	// true cpu
}
