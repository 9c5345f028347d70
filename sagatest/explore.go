package sagatest

type exploreConfig struct {
	replay []int
	seed   uint64
	max    int
}
