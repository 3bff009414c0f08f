// The errors and options of a store over etcd. A failed commit says whether anything may
// have been written: `.commitOutcomeUnknown` may have; every other case wrote nothing.
import StrataContexts

/// Failures of a store over etcd, beside the conflicts and errors every store has.
public enum EtcdError: Error, CustomStringConvertible, CommitOutcomeReporting {
    /// No endpoint accepted a connection; nothing was sent.
    case unreachable(endpoints: [String], cause: String)
    /// The connection was lost, or no answer came in time, after the transaction was sent,
    /// or etcd answered with anything but a refusal that writes nothing (a proposal that
    /// timed out or lost its leader, a member that stopped while the transaction was in
    /// flight, an answer that cannot be read): it may or may not have been applied. A
    /// later read tells.
    case commitOutcomeUnknown(endpoint: String, cause: String)
    /// A commit needs more operations in one etcd transaction than the server allows.
    case tooManyOperations(count: Int, limit: Int)
    /// A commit's request is larger than the server accepts.
    case requestTooLarge(byteCount: Int, limit: Int)
    /// The context read a version older than the oldest this process still maps to an etcd
    /// revision (`EtcdOptions.retainedVersions`): refresh it or start again.
    case snapshotTooOld(version: UInt64, oldest: UInt64)
    /// etcd refused a request (its gRPC status code and message) with a refusal that
    /// writes nothing: a transaction's shape or size, or a server too loaded to take it.
    /// Nothing was written.
    case server(code: Int, message: String)
    /// etcd's answer was not what its API defines.
    case badResponse(String)
    /// `Store.open(etcd:)` was given something it cannot use.
    case invalidConfiguration(String)
    /// TLS to `endpoint` failed: its certificate is not signed by a trusted CA, has expired
    /// or does not name the host, or etcd refused this client's certificate (or its lack of
    /// one). The server took no request: nothing was written, and nothing is ever retried in
    /// clear text.
    case tls(endpoint: String, reason: String)
    /// etcd did not accept who this client says it is: a wrong user or password, no
    /// credentials for a server with authentication on, or credentials for one without.
    /// Nothing was written.
    case authenticationFailed(endpoint: String, user: String?, reason: String)
    /// The user's roles do not grant `operation` ("read", "read and write", "compact") on
    /// the store's prefix. Nothing was written.
    case permissionDenied(prefix: String, user: String?, operation: String)

    /// Whether a commit that failed with this error may nevertheless have been applied.
    public var isCommitOutcomeUnknown: Bool {
        if case .commitOutcomeUnknown = self { true } else { false }
    }

    public var description: String {
        switch self {
        case let .unreachable(endpoints, cause):
            "No etcd endpoint could be reached (\(endpoints.joined(separator: ", "))): \(cause); nothing was written."
        case let .commitOutcomeUnknown(endpoint, cause):
            "The commit was sent to etcd at \(endpoint) and its answer did not tell whether it was applied (\(cause)): "
                + "it may or may not have been; read the keys again to find out."
        case let .tooManyOperations(count, limit):
            "The commit needs \(count) operations in one etcd transaction and the limit is \(limit): start etcd with "
                + "a larger --max-txn-ops and set EtcdOptions.maxTxnOps to it, or commit fewer keys per unit of work."
        case let .requestTooLarge(byteCount, limit):
            "The commit's request is \(byteCount) bytes and the limit is \(limit): start etcd with a larger "
                + "--max-request-bytes and set EtcdOptions.maxRequestBytes to it, or commit less per unit of work."
        case let .snapshotTooOld(version, oldest):
            "The context reads version \(version), older than the oldest this process can check a commit against "
                + "(\(oldest)); refresh the context or run the unit of work again."
        case let .server(code, message):
            "etcd refused the request (code \(code)): \(message)"
        case let .badResponse(reason):
            "etcd's answer could not be read: \(reason)"
        case let .invalidConfiguration(reason):
            "The etcd store cannot be opened: \(reason)"
        case let .tls(endpoint, reason):
            "TLS to etcd at \(endpoint) failed: \(reason)"
        case let .authenticationFailed(endpoint, user, reason):
            "etcd at \(endpoint) did not authenticate \(user.map { "user \"\($0)\"" } ?? "this client"): \(reason). Nothing was written."
        case let .permissionDenied(prefix, user, operation):
            "\(user.map { "User \"\($0)\"" } ?? "This client") may not \(operation) the keys under \"\(prefix)\": grant a role "
                + "\(operation == "read" ? "read" : "readwrite") permission on the prefix (etcdctl role grant-permission ROLE "
                + "\(operation == "read" ? "read" : "readwrite") --prefix=true '\(prefix)'). Nothing was written."
        }
    }
}

/// How a store talks to etcd. The limits must match the server's flags of the same names.
public struct EtcdOptions: Sendable {
    /// The server's `--max-txn-ops` (etcd's default: 128). A commit of k keys that the
    /// context read needs up to 2k compares, and k puts or deletes.
    public var maxTxnOps = 128
    /// The server's `--max-request-bytes` (etcd's default: 1.5 MiB).
    public var maxRequestBytes = 1_572_864
    /// How long a request may take, connecting included; a commit that times out after
    /// it was sent is `EtcdError.commitOutcomeUnknown`.
    public var requestTimeout: Duration = .seconds(10)
    /// How many of the latest versions a commit can have read (each costs 8 bytes); a
    /// context that read an older one gets `EtcdError.snapshotTooOld`.
    public var retainedVersions = 1 << 20
    /// TLS for `https://` endpoints: the CAs to trust and this client's certificate.
    public var tls = EtcdTLS()
    /// The etcd user this store authenticates as, for a server with authentication on;
    /// the user's roles must grant readwrite on the store's prefix.
    public var credentials: EtcdCredentials?
    /// Opt-in compaction of etcd's history by the store itself; nil leaves it to the
    /// server's `--auto-compaction-retention` or the operator.
    public var compaction: EtcdCompaction?

    public init() {}
}

/// TLS to etcd's client port, for `https://` endpoints. The server's certificate is always
/// checked: signed by a trusted CA, valid now, and naming the endpoint's host.
public struct EtcdTLS: Sendable {
    /// A PEM file of the certificate authorities that sign etcd's certificates (etcdctl's
    /// `--cacert`); nil trusts the system's store.
    public var trustedCAFile: String?
    /// PEM files of this client's certificate and private key, for a server started with
    /// `--client-cert-auth` (etcdctl's `--cert` and `--key`). With authentication on too,
    /// etcd's gateway refuses a client certificate with a Common Name: the user is named by
    /// `EtcdOptions.credentials`.
    public var certificateFile: String?
    public var keyFile: String?

    public init(trustedCAFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil) {
        self.trustedCAFile = trustedCAFile
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }

    var isEmpty: Bool { trustedCAFile == nil && certificateFile == nil && keyFile == nil }
}

/// An etcd user and password (etcd's `Auth.Authenticate`). The token it gives is sent with
/// every request and renewed when etcd stops accepting it.
public struct EtcdCredentials: Sendable {
    public var user: String
    public var password: String

    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }
}
