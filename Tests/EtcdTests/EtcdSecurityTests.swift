// TLS and authentication to etcd: a store over a cluster with TLS (client certificates
// required) and authentication on works within its role's prefix, renews its token, and
// sends nothing in clear text; each way it can be refused is its own typed error that names
// what to fix. The cluster is StrataTesting's EtcdCluster, its client port behind a relay
// that records what the store sends.
import Foundation
import Strata
import StrataEtcd
import StrataTesting
import Testing

/// The secure cluster these tests share: one member, TLS with client certificates,
/// authentication with tokens that expire after 3 seconds unused.
enum SecureEtcd {
    static let rootPassword = "root-\(UUID().uuidString)"
    /// Every test user's password.
    static let password = "pw-\(UUID().uuidString)"

    static let shared: Result<EtcdCluster, any Error> = Result {
        var configuration = EtcdCluster.Configuration(members: 1, tls: true, clientCertificates: true, rootPassword: rootPassword)
        configuration.authTokenTTL = 3
        configuration.recordClientTraffic = true
        configuration.maxTxnOps = 1024
        return try EtcdCluster(configuration)
    }

    /// Options with the cluster's CA and client certificate, and `user`'s credentials.
    static func options(_ cluster: EtcdCluster, user: String?, password: String = SecureEtcd.password) throws -> EtcdOptions {
        let certificates = try #require(cluster.certificates)
        var options = EtcdOptions()
        options.maxTxnOps = 1024
        options.tls = EtcdTLS(trustedCAFile: certificates.caFile, certificateFile: certificates.clientCertificateFile,
                              keyFile: certificates.clientKeyFile)
        options.credentials = user.map { EtcdCredentials(user: $0, password: password) }
        return options
    }

    /// A new user whose role grants readwrite on a prefix of its own; returns both.
    static func makeUser(_ cluster: EtcdCluster) throws -> (user: String, prefix: String) {
        let name = "user-\(UUID().uuidString.prefix(8))"
        let prefix = "app-\(name)/"
        try cluster.addUser(name, password: password, readWritePrefix: prefix)
        return (name, prefix)
    }
}

@Suite(.hangLimit) struct EtcdSecurityTests {
    @Test func aStoreOverTLSWithAuthenticationWorksInItsPrefixAndSendsNothingInClearText() async throws {
        let cluster = try SecureEtcd.shared.get()
        let (user, prefix) = try SecureEtcd.makeUser(cluster)
        let marker = "clear-text-marker-\(UUID().uuidString)"
        let first = try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: SecureEtcd.options(cluster, user: user))
        defer { try? first.close() }
        let second = try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: SecureEtcd.options(cluster, user: user))
        defer { try? second.close() }
        try await first.write { unit in try unit.put(bytes(marker), bytes(marker)) }
        // The other store's watch, over TLS with a token too, brings it.
        #expect(try await eventually { try second.read { try $0.get(bytes(marker)) } == bytes(marker) })

        // What crossed the relay: TLS records only, and neither the key nor the value in any
        // form the gateway carries them (raw, or base64 of the prefixed key and the value).
        let sent = cluster.clientRelays[0].recorded()
        #expect(sent.first == 0x16, "the first byte a client sent is not a TLS handshake record")
        let forms = [marker, Data((prefix + marker).utf8).base64EncodedString(), Data(marker.utf8).base64EncodedString(), SecureEtcd.password, user]
        for form in forms {
            #expect(!contains(sent, Array(form.utf8)), "\"\(form)\" crossed the network in clear text")
        }
    }

    @Test func anExpiredTokenIsRenewedWithoutLosingACommitOrAWatchEvent() async throws {
        let cluster = try SecureEtcd.shared.get()
        let (user, prefix) = try SecureEtcd.makeUser(cluster)
        // The watching store reaches etcd through a relay of its own, to drop its watch.
        let port = try #require(UInt16(cluster.endpoints[0].split(separator: ":").last ?? ""))
        let relay = try TCPRelay(to: port)
        defer { relay.close() }
        let watcher = try await Store.open(etcd: ["https://127.0.0.1:\(relay.port)"], prefix: prefix,
                                           options: SecureEtcd.options(cluster, user: user))
        defer { try? watcher.close() }
        let writer = try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: SecureEtcd.options(cluster, user: user))
        defer { try? writer.close() }
        try await writer.write { unit in try unit.put(bytes("a"), bytes("1")) }
        #expect(try await eventually { try watcher.read { try $0.get(bytes("a")) } == bytes("1") })

        // Both tokens expire (3 s unused); the watch goes on, and a commit renews its token.
        try await Task.sleep(for: .seconds(4))
        try await writer.write { unit in try unit.put(bytes("b"), bytes("1")) }
        #expect(try await eventually { try watcher.read { try $0.get(bytes("b")) } == bytes("1") })

        // The watcher's connection drops while its token is expired: its new watch is refused
        // for the token, and the one after, with a new token, resumes where it stopped.
        try await Task.sleep(for: .seconds(4))
        relay.cut()
        try await writer.write { unit in try unit.put(bytes("c"), bytes("1")) }
        try relay.restore()
        #expect(try await eventually { try watcher.read { try $0.get(bytes("c")) } == bytes("1") })
        try await watcher.write { unit in try unit.put(bytes("d"), bytes("1")) }
        // The writer learns of "d" through its own watch, so it is awaited (a lost event
        // would never arrive).
        #expect(try await eventually {
            try writer.read { try $0.scan() }.map { String(decoding: $0.key, as: UTF8.self) } == ["a", "b", "c", "d"]
        })
    }

    @Test func aWrongPasswordOrNoCredentialsIsAnAuthenticationError() async throws {
        let cluster = try SecureEtcd.shared.get()
        let (user, prefix) = try SecureEtcd.makeUser(cluster)
        await #expect { try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: SecureEtcd.options(cluster, user: user, password: "wrong")) } throws: { error in
            guard case let EtcdError.authenticationFailed(endpoint, failedUser, reason) = error else { return false }
            return cluster.endpoints.contains(endpoint) && failedUser == user && reason.contains("EtcdOptions.credentials")
        }
        await #expect { try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: SecureEtcd.options(cluster, user: nil)) } throws: { error in
            guard case let EtcdError.authenticationFailed(_, failedUser, reason) = error else { return false }
            return failedUser == nil && reason.contains("set EtcdOptions.credentials")
        }
    }

    @Test func aRoleWithoutThePrefixIsRefusedAtOpenNamingItAndWhatIsMissing() async throws {
        let cluster = try SecureEtcd.shared.get()
        let (user, prefix) = try SecureEtcd.makeUser(cluster)
        let other = "elsewhere-\(UUID().uuidString)/"
        await #expect { try await Store.open(etcd: cluster.endpoints, prefix: other, options: SecureEtcd.options(cluster, user: user)) } throws: { error in
            guard case let EtcdError.permissionDenied(deniedPrefix, deniedUser, operation) = error else { return false }
            return deniedPrefix == other && deniedUser == user && operation == "read"
        }
        // Read but not write: refused at open too, before any commit.
        let reader = "reader-\(UUID().uuidString.prefix(8))"
        try cluster.addUser(reader, password: SecureEtcd.password, readPrefix: prefix)
        await #expect { try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: SecureEtcd.options(cluster, user: reader)) } throws: { error in
            guard case let EtcdError.permissionDenied(deniedPrefix, deniedUser, operation) = error else { return false }
            return deniedPrefix == prefix && deniedUser == reader && operation == "read and write"
                && "\(error)".contains("grant-permission ROLE readwrite")
        }
    }

    @Test func aCAThatDidNotSignTheServerOrNoClientCertificateIsATLSError() async throws {
        let cluster = try SecureEtcd.shared.get()
        let (user, prefix) = try SecureEtcd.makeUser(cluster)
        let directory = NSTemporaryDirectory() + "strata-other-ca-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let otherCA = try EtcdCertificates(directory: directory)
        var wrongCA = try SecureEtcd.options(cluster, user: user)
        wrongCA.tls.trustedCAFile = otherCA.caFile
        await #expect { try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: wrongCA) } throws: { error in
            guard case let EtcdError.tls(endpoint, reason) = error else { return false }
            // The server's certificate failed the client's check (not a refused connection).
            return cluster.endpoints.contains(endpoint) && reason.contains("CERTIFICATE_VERIFY_FAILED") && reason.contains("trustedCAFile")
        }
        var noClientCertificate = try SecureEtcd.options(cluster, user: user)
        noClientCertificate.tls.certificateFile = nil
        noClientCertificate.tls.keyFile = nil
        await #expect { try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: noClientCertificate) } throws: { error in
            guard case let EtcdError.tls(endpoint, reason) = error else { return false }
            return cluster.endpoints.contains(endpoint) && reason.contains("certificateFile")
        }
    }

    /// A member serving `served` to clients is refused with a TLS error naming the
    /// endpoint and every one of `reasons`.
    private func servedCertificateIsRefused(_ served: EtcdCluster.ServedCertificate, saying reasons: [String]) async throws {
        var configuration = EtcdCluster.Configuration(members: 1, tls: true)
        configuration.servedCertificate = served
        let cluster = try EtcdCluster(configuration)
        defer { cluster.shutdown() }
        var options = EtcdOptions()
        options.tls = EtcdTLS(trustedCAFile: try #require(cluster.certificates).caFile)
        await #expect { try await Store.open(etcd: cluster.endpoints, prefix: "p/", options: options) } throws: { error in
            guard case let EtcdError.tls(endpoint, reason) = error else { return false }
            return endpoint == cluster.endpoints[0] && reasons.allSatisfy(reason.contains)
        }
    }

    @Test func anExpiredServerCertificateIsATLSError() async throws {
        // The member serves clients a certificate of the cluster's own CA that expired yesterday.
        try await servedCertificateIsRefused(.expired, saying: ["CERTIFICATE_VERIFY_FAILED", "valid today"])
    }

    @Test func aStoreWithAuthenticationCompactsEtcdsHistory() async throws {
        let cluster = try SecureEtcd.shared.get()
        let (user, prefix) = try SecureEtcd.makeUser(cluster)
        var options = try SecureEtcd.options(cluster, user: user)
        options.compaction = EtcdCompaction(retainedRevisions: 2, retention: .zero, interval: .milliseconds(100))
        let store = try await Store.open(etcd: cluster.endpoints, prefix: prefix, options: options)
        defer { try? store.close() }
        for index in 0..<10 { try await store.write { unit in try unit.put(bytes("k"), bytes("\(index)")) } }
        let first = try #require(Int(cluster.etcdctl(["get", prefix + "k", "-w", "fields", "--consistency=l"])
            .split(separator: "\n").first { $0.hasPrefix("\"CreateRevision\"") }?.split(separator: " ").last ?? ""))
        // The role limited to its prefix may compact: the revision that created the key goes.
        #expect(try await eventually {
            (try? cluster.etcdctl(["get", prefix + "k", "--rev", "\(first)"])) == nil
        })
        #expect(throws: (any Error).self) { try cluster.etcdctl(["get", prefix + "k", "--rev", "\(first)"]) }
        #expect(try await store.read { try $0.get(bytes("k")) } == bytes("9"))
    }

    @Test func aServerCertificateForAnotherHostIsATLSError() async throws {
        // Signed by the CA the client trusts and valid now, but naming another host only.
        try await servedCertificateIsRefused(.otherHost, saying: ["failedToValidateHostname"])
    }

    @Test func certificatesWithPlainHTTPOrMixedSchemesAreRefused() async throws {
        var options = EtcdOptions()
        options.tls = EtcdTLS(trustedCAFile: "/nonexistent/ca.pem")
        await #expect { try await Store.open(etcd: ["http://127.0.0.1:1"], prefix: "p/", options: options) } throws: { error in
            guard case let EtcdError.invalidConfiguration(reason) = error else { return false }
            return reason.contains("clear text")
        }
        await #expect { try await Store.open(etcd: ["https://127.0.0.1:1", "http://127.0.0.1:2"], prefix: "p/") } throws: { error in
            guard case let EtcdError.invalidConfiguration(reason) = error else { return false }
            return reason.contains("mix")
        }
        await #expect { try await Store.open(etcd: ["https://127.0.0.1:1"], prefix: "p/", options: options) } throws: { error in
            guard case let EtcdError.invalidConfiguration(reason) = error else { return false }
            return reason.contains("/nonexistent/ca.pem")
        }
    }

    private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { start in
            haystack[start] == needle[0] && haystack[start..<(start + needle.count)].elementsEqual(needle)
        }
    }
}
