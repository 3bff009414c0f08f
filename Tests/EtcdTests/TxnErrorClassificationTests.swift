// How a transaction's failure reported by etcd's gateway is classified (EtcdClient.classify):
// an error after which the proposal may still be applied is an unknown outcome, which a
// caller resolves by reading; only an error that says nothing was proposed is "not written",
// which a caller may simply try again. Retrying a transaction that was in fact applied
// would apply its changes twice.
@testable import StrataEtcd
import Testing

@Suite struct TxnErrorClassificationTests {
    @Test(arguments: [
        "etcdserver: request timed out", "etcdserver: request timed out, possibly due to previous leader failure",
        "etcdserver: leader changed", "etcdserver: no leader", "etcdserver: server stopped", "etcdserver: request cancelled",
        "context canceled", "context deadline exceeded",
    ])
    func aProposalThatMayStillApplyIsAnUnknownOutcome(_ message: String) {
        let error = EtcdClient.classify(GatewayError(error: message, message: message, code: 14), outcomeUnknownAt: "http://127.0.0.1:2379")
        #expect(error.isCommitOutcomeUnknown, "\(message): \(error)")
    }

    @Test(arguments: [
        "etcdserver: too many operations in txn request", "etcdserver: request is too large",
        "etcdserver: permission denied", "etcdserver: user name is empty",
    ])
    func aRefusalBeforeAnyProposalIsNotAnUnknownOutcome(_ message: String) {
        let error = EtcdClient.classify(GatewayError(error: message, message: message, code: 3), outcomeUnknownAt: "http://127.0.0.1:2379")
        #expect(!error.isCommitOutcomeUnknown, "\(message): \(error)")
    }
}
