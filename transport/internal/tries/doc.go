// Package tries makes JetStream requests in bounded tries.
//
// On a cluster a JetStream request can go unanswered: one that reaches a
// stream while it elects a leader (after a stepdown, or when its leader
// died) is dropped by every replica, and nats-server sends no error for
// it; a publish can even be stored by the new leader and still get no
// answer. Waiting for the answer would hold the caller for its whole
// deadline. So each request is one try of at most a try limit (250 ms,
// or more when the server answers slowly; doubling with each try, up to
// 2 s); an unanswered try, or an answer saying that the stream has no
// leader yet, is asked again until the caller's context ends. Each caller makes its retries safe: a retried write is
// guarded so that the server stores it at most once, and a refusal of a
// retry is told apart from a duplicate.
package tries
