// A throwaway etcd cluster on loopback for tests of code that runs on StrataEtcd: one or
// more members, optionally with TLS (certificates made by EtcdCertificates) and with
// authentication on (a root user; more users and roles through `addUser`). Each member's
// client and peer ports are reached through a TCPRelay of their own, so a test can cut a
// member off: `partition(i)` drops and refuses every connection into member i, from clients
// and from its peers, until `heal(i)`. That is a one-way partition: the connections member i
// dialed to its peers stay, and etcd's peers stream messages over connections each side
// dials to read the other. So member i goes on hearing the others while they no longer hear
// it: as leader it loses its followers (they read it over connections they dialed to it) and
// steps down; as a follower it keeps receiving the leader's entries while its answers are
// lost, and clients cannot reach it. A symmetric partition needs network namespaces.
// Members can also be killed, stopped, restarted (with their data), frozen and thawed.
//
// Users and roles are set with etcdctl (Debian: etcd-client, installed by scripts/bootstrap),
// the tool an operator would use.
import Foundation
import Synchronization

/// An etcd cluster started for a test.
///
///     let cluster = try EtcdCluster(EtcdCluster.Configuration(members: 3, tls: true, rootPassword: "secret"))
///     try cluster.addUser("app", password: "pw", readWritePrefix: "app/")
public final class EtcdCluster: Sendable {
    public struct Configuration: Sendable {
        /// How many members (1, 3 or 5 make sense).
        public var members = 3
        /// TLS on the client and peer ports, with certificates made for the cluster.
        public var tls = false
        /// Clients must present a certificate signed by the cluster's CA (`--client-cert-auth`).
        public var clientCertificates = false
        /// When set, authentication is on, with this root password.
        public var rootPassword: String?
        /// etcd's `--auth-token-ttl`, seconds a simple token lives unused (etcd's default: 300).
        public var authTokenTTL: Int?
        /// etcd's `--max-txn-ops`.
        public var maxTxnOps = 128
        /// Raft's heartbeat and election timeout, in milliseconds (etcd's defaults: 100, 1000).
        public var heartbeatMilliseconds = 100
        public var electionTimeoutMilliseconds = 1_000
        /// What certificate the members serve clients (their peers always use a valid one);
        /// with `tls` only.
        public var servedCertificate = ServedCertificate.valid
        /// The client relays keep what clients send (`clientRelays[i].recorded()`).
        public var recordClientTraffic = false
        public var parentDirectory = NSTemporaryDirectory()

        public init(members: Int = 3, tls: Bool = false, clientCertificates: Bool = false, rootPassword: String? = nil) {
            self.members = members
            self.tls = tls
            self.clientCertificates = clientCertificates
            self.rootPassword = rootPassword
        }
    }

    /// The certificate members serve clients, to test how clients refuse a bad one.
    public enum ServedCertificate: Sendable {
        /// Signed by the cluster's CA, valid now, naming 127.0.0.1 and localhost.
        case valid
        /// Signed by the cluster's CA, expired yesterday.
        case expired
        /// Signed by the cluster's CA, valid now, naming only `elsewhere.invalid`.
        case otherHost
    }

    public let configuration: Configuration
    /// The cluster's directory: members' data, logs and certificates.
    public let directory: String
    /// The certificates, when `tls` is on.
    public let certificates: EtcdCertificates?
    /// Each member's client URL through its relay (what stores should be given).
    public let endpoints: [String]
    /// Each member's client URL, direct (for etcdctl and checks that must not be cut).
    public let directEndpoints: [String]
    /// The relays in front of each member's client port (they see what clients send).
    public let clientRelays: [TCPRelay]
    private let peerRelays: [TCPRelay]
    private let arguments: [[String]]
    private let clientPorts: [UInt16]
    private let members: Mutex<[EtcdMember?]>

    /// Starts the members and returns once the cluster has a leader (and, with a root
    /// password, authentication is on).
    public init(_ configuration: Configuration = Configuration()) throws {
        guard configuration.members >= 1 else { throw EtcdProcess.StartError("a cluster needs at least one member") }
        guard configuration.tls || !configuration.clientCertificates && configuration.servedCertificate == .valid else {
            throw EtcdProcess.StartError("client certificates and a served certificate other than .valid need tls: set Configuration.tls")
        }
        self.configuration = configuration
        let etcd = try EtcdMember.executable()
        directory = (configuration.parentDirectory as NSString).appendingPathComponent("strata-etcd-cluster-\(UUID().uuidString)")
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        EtcdMember.removeAtExit(directory)
        certificates = configuration.tls ? try EtcdCertificates(directory: directory + "/certificates") : nil
        let scheme = configuration.tls ? "https" : "http"
        let count = configuration.members
        let clientPorts = try (0..<count).map { _ in try EtcdMember.freePort() }
        let peerPorts = try (0..<count).map { _ in try EtcdMember.freePort() }
        let clientRelays = try clientPorts.map { try TCPRelay(to: $0, recording: configuration.recordClientTraffic) }
        let peerRelays = try peerPorts.map { try TCPRelay(to: $0) }
        let names = (0..<count).map { "m\($0)" }
        let initialCluster = (0..<count).map { "\(names[$0])=\(scheme)://127.0.0.1:\(peerRelays[$0].port)" }.joined(separator: ",")
        let token = "strata-\(UUID().uuidString)"
        var served = certificates.map { ($0.serverCertificateFile, $0.serverKeyFile) }
        if let certificates {
            let now = Date()
            switch configuration.servedCertificate {
            case .valid:
                break
            case .expired:
                served = try certificates.issue(server: true, validFrom: now - 3 * 86_400, until: now - 86_400,
                                                certificate: certificates.directory + "/expired.pem",
                                                key: certificates.directory + "/expired-key.pem")
            case .otherHost:
                served = try certificates.issue(server: true, hostName: "elsewhere.invalid", validFrom: now - 3_600, until: now + 86_400,
                                                certificate: certificates.directory + "/other-host.pem",
                                                key: certificates.directory + "/other-host-key.pem")
            }
        }
        var arguments: [[String]] = []
        for index in 0..<count {
            let client = "\(scheme)://127.0.0.1:\(clientPorts[index])"
            var member = [
                etcd, "--name", names[index], "--data-dir", directory + "/\(names[index])",
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", "\(scheme)://127.0.0.1:\(peerPorts[index])",
                "--initial-advertise-peer-urls", "\(scheme)://127.0.0.1:\(peerRelays[index].port)",
                "--initial-cluster", initialCluster, "--initial-cluster-token", token, "--initial-cluster-state", "new",
                "--max-txn-ops", "\(configuration.maxTxnOps)",
                "--heartbeat-interval", "\(configuration.heartbeatMilliseconds)",
                "--election-timeout", "\(configuration.electionTimeoutMilliseconds)",
            ]
            if let certificates, let (certificate, key) = served {
                member += ["--cert-file", certificate, "--key-file", key,
                           "--peer-cert-file", certificates.serverCertificateFile, "--peer-key-file", certificates.serverKeyFile,
                           "--peer-trusted-ca-file", certificates.caFile, "--peer-client-cert-auth"]
                if configuration.clientCertificates { member += ["--trusted-ca-file", certificates.caFile, "--client-cert-auth"] }
            }
            if let ttl = configuration.authTokenTTL { member += ["--auth-token-ttl", "\(ttl)"] }
            arguments.append(member)
        }
        self.arguments = arguments
        self.clientPorts = clientPorts
        self.clientRelays = clientRelays
        self.peerRelays = peerRelays
        endpoints = clientRelays.map { "\(scheme)://127.0.0.1:\($0.port)" }
        directEndpoints = clientPorts.map { "\(scheme)://127.0.0.1:\($0)" }
        members = Mutex(Array(repeating: nil, count: count))
        do {
            for index in 0..<count { try start(index) }
            try waitForLeader()
            if let password = configuration.rootPassword {
                _ = try etcdctl(["user", "add", "root:\(password)"], asRoot: false)
                _ = try etcdctl(["user", "grant-role", "root", "root"], asRoot: false)
                _ = try etcdctl(["auth", "enable"], asRoot: false)
            }
        } catch {
            shutdown()
            throw error
        }
    }

    deinit { shutdown() }

    /// Kills every member, waits for each, and removes the cluster's directory.
    public func shutdown() {
        let running = members.withLock { members in
            defer { members = members.map { _ in nil } }
            return members.compactMap { $0 }
        }
        for member in running { member.kill() }
        for relay in clientRelays + peerRelays { relay.close() }
        try? FileManager.default.removeItem(atPath: directory)
        EtcdMember.keep(directory)
    }

    // MARK: Faults

    /// Kills member `index` (SIGKILL) and waits until it has exited.
    public func kill(_ index: Int) {
        let member = members.withLock { members in
            defer { members[index] = nil }
            return members[index]
        }
        member?.kill()
    }

    /// Stops member `index` gracefully (SIGTERM) and waits until it has exited.
    public func stop(_ index: Int) {
        let member = members.withLock { members in
            defer { members[index] = nil }
            return members[index]
        }
        member?.stop()
    }

    /// Starts member `index` again on its data, after `kill` or `stop`.
    public func restart(_ index: Int) throws {
        guard members.withLock({ $0[index] == nil }) else { return }
        try start(index)
    }

    /// Drops and refuses every connection into member `index`, from clients and peers, until
    /// `heal` (a one-way partition: see the top of this file).
    public func partition(_ index: Int) {
        clientRelays[index].cut()
        peerRelays[index].cut()
    }

    public func heal(_ index: Int) throws {
        try clientRelays[index].restore()
        try peerRelays[index].restore()
    }

    /// Freezes or thaws member `index`'s process, as a hung machine would.
    public func pause(_ index: Int) { members.withLock { $0[index] }?.pause() }
    public func resume(_ index: Int) { members.withLock { $0[index] }?.resume() }

    /// Whether member `index` runs.
    public func isRunning(_ index: Int) -> Bool { members.withLock { $0[index] }?.isRunning ?? false }

    /// The member that is leader, as the running members see it (asked directly, past the
    /// relays), or nil when none is (an election is under way).
    public func leader() -> Int? {
        var ids: [Int: String] = [:]
        var leaders: [String] = []
        for index in 0..<configuration.members where isRunning(index) {
            guard let status = try? etcdctl(["endpoint", "status", "-w", "json"], endpoints: [directEndpoints[index]], timeout: 3),
                  let id = Self.field("member_id", in: status), let leader = Self.field("leader", in: status) else { continue }
            ids[index] = id
            leaders.append(leader)
        }
        guard let leader = leaders.first, leader != "0" else { return nil }
        return ids.first { $0.value == leader }?.key
    }

    /// Waits up to `seconds` for a leader.
    @discardableResult
    public func waitForLeader(seconds: Double = 30) throws -> Int {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let leader = leader() { return leader }
            usleep(100_000)
        }
        throw EtcdProcess.StartError("the etcd cluster elected no leader within \(seconds) s: \(logTail())")
    }

    // MARK: Users

    /// Adds a user with a role of its own granting readwrite on keys starting with
    /// `readWritePrefix` and read on keys starting with `readPrefix` (either may be nil).
    public func addUser(_ name: String, password: String, readWritePrefix: String? = nil, readPrefix: String? = nil) throws {
        let role = "role-\(name)"
        _ = try etcdctl(["role", "add", role])
        if let prefix = readWritePrefix { _ = try etcdctl(["role", "grant-permission", role, "readwrite", "--prefix=true", prefix]) }
        if let prefix = readPrefix { _ = try etcdctl(["role", "grant-permission", role, "read", "--prefix=true", prefix]) }
        _ = try etcdctl(["user", "add", "\(name):\(password)"])
        _ = try etcdctl(["user", "grant-role", name, role])
    }

    /// Runs etcdctl against the cluster (every running member, directly), as root when
    /// authentication is on, and returns what it printed.
    public func etcdctl(_ arguments: [String], endpoints: [String]? = nil, asRoot: Bool = true, timeout: Int = 10) throws -> String {
        guard let tool = ["/usr/bin/etcdctl", "/usr/local/bin/etcdctl"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw EtcdProcess.StartError("etcdctl is not installed: run scripts/bootstrap (Debian's etcd-client)")
        }
        let targets = endpoints ?? (0..<configuration.members).filter { isRunning($0) }.map { directEndpoints[$0] }
        var command = ["--endpoints", targets.joined(separator: ","), "--command-timeout", "\(timeout)s", "--dial-timeout", "3s"]
        if let certificates {
            // The client certificate has no Common Name: etcd would take one for the user.
            command += ["--cacert", certificates.caFile, "--cert", certificates.clientCertificateFile, "--key", certificates.clientKeyFile]
            // The administrator's tool still reaches members that serve an expired certificate.
            if configuration.servedCertificate != .valid { command.append("--insecure-skip-tls-verify") }
        }
        if asRoot, let password = configuration.rootPassword { command += ["--user", "root:\(password)"] }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = command + arguments
        process.environment = ["ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"]
        let output = Pipe(), errors = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        let complaint = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw EtcdProcess.StartError("etcdctl \(arguments.joined(separator: " ")) failed: \(String(decoding: complaint, as: UTF8.self))")
        }
        return String(decoding: printed, as: UTF8.self)
    }

    // MARK: Internals

    private func start(_ index: Int) throws {
        let member = try EtcdMember(arguments: arguments[index], log: directory + "/m\(index).log", port: clientPorts[index], removing: nil)
        members.withLock { $0[index] = member }
    }

    private func logTail() -> String {
        (0..<configuration.members).map { index in
            let log = (try? String(contentsOfFile: directory + "/m\(index).log", encoding: .utf8)) ?? ""
            return "m\(index): \(log.suffix(600))"
        }.joined(separator: "\n")
    }

    /// The digits of `"name":123` in etcdctl's JSON (64-bit ids, which a Double would round).
    private static func field(_ name: String, in json: String) -> String? {
        guard let range = json.range(of: "\"\(name)\":") else { return nil }
        let digits = json[range.upperBound...].prefix { $0.isNumber }
        return digits.isEmpty ? nil : String(digits)
    }
}
