// How a transaction's failure reported by etcd's gateway is classified (EtcdClient.classify):
// only an answer that says nothing was written anywhere (a refusal of the request's shape
// or size, of a server too loaded to take it, or of the user's credentials or
// permissions) is "not written", which
// a caller may simply try again; every other answer may come after the proposal was
// applied, and is an unknown outcome, which a caller resolves by reading. Retrying a
// transaction that was in fact applied would apply its changes twice.
import Foundation
import NIOSSL
@testable import StrataEtcd
import Testing

@Suite struct TxnErrorClassificationTests {
    @Test(arguments: [
        "etcdserver: request timed out", "etcdserver: request timed out, possibly due to previous leader failure",
        "etcdserver: leader changed", "etcdserver: no leader", "etcdserver: server stopped", "etcdserver: request cancelled",
        "context canceled", "context deadline exceeded",
        // What the gateway of a member stopped gracefully answers for the transactions it
        // had in flight, after applying them (etcd 3.4).
        "transport is closing", "error reading from server: EOF",
        "etcdserver: unhealthy cluster", "etcdserver: not capable", "an answer no etcd version gives",
        // Answered also for a transaction applied as the quota ran out.
        "etcdserver: mvcc: database space exceeded",
    ])
    func aProposalThatMayStillApplyIsAnUnknownOutcome(_ message: String) {
        let error = EtcdClient.classify(GatewayError(error: message, message: message, code: 14), outcomeUnknownAt: "http://127.0.0.1:2379")
        #expect(error.isCommitOutcomeUnknown, "\(message): \(error)")
    }

    @Test(arguments: [
        "etcdserver: too many operations in txn request", "etcdserver: request is too large",
        "etcdserver: duplicate key given in txn request", "etcdserver: key is not provided",
        "etcdserver: too many requests",
        "etcdserver: permission denied", "etcdserver: user name is empty",
    ])
    func aRefusalBeforeAnyProposalIsNotAnUnknownOutcome(_ message: String) {
        let error = EtcdClient.classify(GatewayError(error: message, message: message, code: 3), outcomeUnknownAt: "http://127.0.0.1:2379")
        #expect(!error.isCommitOutcomeUnknown, "\(message): \(error)")
    }

    /// A TLS error on a transaction's connection says nothing was sent only when the
    /// handshake could not have let the request through: a host name that does not match.
    /// Any other (no progress on a kept-alive connection, say) may follow the request.
    /// For a request that writes nothing, each of them is a refusal.
    @Test func aTransactionsTLSErrorIsARefusalOnlyForAHostNameMismatch() {
        for error in [NIOSSLExtraError.failedToValidateHostname, .serverHostnameImpossibleToMatch] {
            #expect(EtcdClient.tlsRefusal(error, handshakeOnly: true) != nil, "\(error)")
        }
        for error in [NIOSSLExtraError.cannotUseIPAddressInSNI, .invalidSNIHostname, .unknownPrivateKeyFileType] {
            #expect(EtcdClient.tlsRefusal(error, handshakeOnly: true) == nil, "\(error)")
            #expect(EtcdClient.tlsRefusal(error, handshakeOnly: false) != nil, "\(error)")
        }
    }

    /// An answer that is not etcd's JSON (a proxy's error page, a body cut short) may follow
    /// a transaction that was applied: unknown. The same answer to a read is just unreadable.
    @Test(arguments: [
        (status: "502 Bad Gateway", body: "upstream went away"),
        (status: "200 OK", body: "{\"header\":"),
    ])
    func aTransactionWhoseAnswerCannotBeReadHasAnUnknownOutcome(_ answer: (status: String, body: String)) async throws {
        let server = try CannedHTTPServer(status: answer.status, body: answer.body)
        defer { server.close() }
        let client = try EtcdClient(endpoints: ["http://127.0.0.1:\(server.port)"], options: EtcdOptions())
        do {
            _ = try await client.txn(Array("{}".utf8)).get()
            Issue.record("an unreadable answer was taken for a transaction's")
        } catch let error as EtcdError {
            #expect(error.isCommitOutcomeUnknown, "\(error)")
        }
        do {
            _ = try await client.range(RangeRequest(key: EtcdBytes(Array("k".utf8)))).get()
            Issue.record("an unreadable answer was taken for a read's")
        } catch let error as EtcdError {
            guard case .badResponse = error else {
                Issue.record("a read's unreadable answer is \(error)")
                return
            }
        }
    }
}

/// A server on loopback that answers every request with the same HTTP response and closes
/// the connection. Its thread owns the listening socket: `close()` shuts it down, which
/// ends the thread's `accept`, and the thread closes it (so no later socket of the process
/// can take its number while the thread still uses it).
final class CannedHTTPServer: Sendable {
    let port: UInt16
    private let listener: Int32

    init(status: String, body: String) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 8) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else {
            let error = errno
            Glibc.close(listener)
            throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "cannot listen on loopback: errno \(error)"])
        }
        port = UInt16(bigEndian: address.sin_port)
        self.listener = listener
        let response = Array("HTTP/1.1 \(status)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)".utf8)
        Thread.detachNewThread {
            while true {
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else {
                    Glibc.close(listener)
                    return
                }
                // Reads the request's head and as much of its body as has come, then answers.
                var request: [UInt8] = [], buffer = [UInt8](repeating: 0, count: 4096)
                while !request.containsHeadEnd {
                    let count = read(connection, &buffer, buffer.count)
                    guard count > 0 else { break }
                    request += buffer[..<count]
                }
                // MSG_NOSIGNAL: a client already gone is no SIGPIPE.
                _ = response.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                shutdown(connection, Int32(SHUT_WR))
                while read(connection, &buffer, buffer.count) > 0 {}
                Glibc.close(connection)
            }
        }
    }

    func close() { shutdown(listener, Int32(SHUT_RDWR)) }
}

private extension [UInt8] {
    var containsHeadEnd: Bool {
        count >= 4 && indices.dropLast(3).contains { self[$0] == 13 && self[$0 + 1] == 10 && self[$0 + 2] == 13 && self[$0 + 3] == 10 }
    }
}
