// Package temporal is a timeout engine on Temporal, for timeouts days or
// months away.
package temporal
