package partition_test

import (
	"fmt"

	"github.com/quotaplatform/quota/partition"
)

// Three regions with skewed demand for one key: shares follow demand, the
// quiet region keeps its floor, and the shares sum to exactly one.
func ExampleShares() {
	shares, err := partition.Shares([]partition.Region{
		{Name: "eu", Demand: 900, Weight: 0.5, Floor: 0.05},
		{Name: "us", Demand: 100, Weight: 0.3, Floor: 0.05},
		{Name: "ap", Demand: 0, Weight: 0.2, Floor: 0.05},
	}, partition.Params{})
	if err != nil {
		panic(err)
	}
	var sum int64
	for _, s := range shares {
		fmt.Printf("%s %.4f\n", s.Name, s.Fraction())
		sum += s.Micro
	}
	fmt.Println(sum == partition.Micro)
	// Output:
	// ap 0.0500
	// eu 0.8550
	// us 0.0950
	// true
}
