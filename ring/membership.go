package ring

// Membership is a node's ring as it tells the Go client (the Cluster
// service): with the same Members and Config, New gives the node's owners.
type Membership struct {
	Node    string // the node that sent it
	Version uint64 // the node's ring version; versions of different nodes are unrelated
	Members []Member
	Config  Config
}
