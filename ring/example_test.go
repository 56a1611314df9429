package ring_test

import (
	"fmt"

	"github.com/shardlimiter/shardlimiter/ring"
)

func ExampleNew() {
	// Member order does not matter: every node that sees these three
	// members computes the same owners.
	members := []ring.Member{
		{Name: "node-c", Addr: "10.0.0.3:8081"},
		{Name: "node-a", Addr: "10.0.0.1:8081"},
		{Name: "node-b", Addr: "10.0.0.1:9081"}, // same host as node-a
	}
	s, err := ring.New(members, 1, ring.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, key := range []string{"account:42", "account:46", "user-a"} {
		owner := s.Owner(key)
		fmt.Printf("%s → %s at %s\n", key, owner.Name, owner.Addr)
	}
	fmt.Println(s.Members()[0].Name, s.Len(), s.Version())
	// Output:
	// account:42 → node-c at 10.0.0.3:8081
	// account:46 → node-b at 10.0.0.1:9081
	// user-a → node-a at 10.0.0.1:8081
	// node-a 3 1
}

func ExampleSnapshot_IndexOf() {
	s, err := ring.New([]ring.Member{{Name: "node-a"}, {Name: "node-b"}}, 7, ring.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A node finds itself once per snapshot, then routes a whole batch with
	// that snapshot: a key is local when its owner index is its own.
	self := s.IndexOf("node-a")
	for _, key := range []string{"account:1", "account:2", "account:3", "account:4"} {
		fmt.Println(key, "local:", s.OwnerIndex(key) == self, "version:", s.Version())
	}
	// Output:
	// account:1 local: false version: 7
	// account:2 local: false version: 7
	// account:3 local: false version: 7
	// account:4 local: true version: 7
}

func ExampleSnapshot_Shares() {
	s, err := ring.New([]ring.Member{{Name: "node-a"}, {Name: "node-b"}}, 1, ring.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	shares := s.Shares()
	fmt.Printf("node-a %.3f, node-b %.3f\n", shares["node-a"], shares["node-b"])
	// Output:
	// node-a 0.525, node-b 0.475
}
