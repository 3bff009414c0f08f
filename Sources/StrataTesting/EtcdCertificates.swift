// Certificates for a test etcd on loopback, made with swift-certificates and swift-crypto
// (P-256 keys, ECDSA with SHA-256): a CA, a certificate for the members (127.0.0.1 and
// localhost, for serving clients and for peers), and a client certificate. Written as PEM
// files, as etcd and `EtcdTLS` read them.
import Crypto
import Foundation
import SwiftASN1
import X509

/// A test certificate authority and the certificates it signs, as PEM files in `directory`.
///
///     let certificates = try EtcdCertificates(directory: dir)
///     options.tls = EtcdTLS(trustedCAFile: certificates.caFile,
///                           certificateFile: certificates.clientCertificateFile, keyFile: certificates.clientKeyFile)
public struct EtcdCertificates: Sendable {
    public let directory: String
    /// The CA's certificate: what clients trust.
    public let caFile: String
    /// The members' certificate and key (server and client use, for 127.0.0.1 and localhost).
    public let serverCertificateFile: String
    public let serverKeyFile: String
    /// A client certificate and key, signed by the CA, with no Common Name (etcd's gateway
    /// refuses one with a Common Name when authentication is on).
    public let clientCertificateFile: String
    public let clientKeyFile: String

    private let caKey: P256.Signing.PrivateKey
    private let caName: DistinguishedName

    /// Makes a new CA and its server and client certificates, valid from an hour ago for
    /// `days` days, in `directory` (created when missing).
    public init(directory: String, days: Int = 7) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.directory = directory
        let now = Date()
        caKey = P256.Signing.PrivateKey()
        caName = try DistinguishedName {
            OrganizationName("Strata tests")
            CommonName("Strata test CA \(UUID().uuidString.prefix(8))")
        }
        let ca = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: Certificate.PublicKey(caKey.publicKey),
            notValidBefore: now - 3_600, notValidAfter: now + Double(days) * 86_400,
            issuer: caName, subject: caName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
            },
            issuerPrivateKey: Certificate.PrivateKey(caKey))
        caFile = directory + "/ca.pem"
        try Self.write(ca.serializeAsPEM().pemString, to: caFile)
        serverCertificateFile = directory + "/server.pem"
        serverKeyFile = directory + "/server-key.pem"
        clientCertificateFile = directory + "/client.pem"
        clientKeyFile = directory + "/client-key.pem"
        try issue(server: true, validFrom: now - 3_600, until: now + Double(days) * 86_400,
                  certificate: serverCertificateFile, key: serverKeyFile)
        try issue(server: false, validFrom: now - 3_600, until: now + Double(days) * 86_400,
                  certificate: clientCertificateFile, key: clientKeyFile)
    }

    /// Signs a new certificate and key with this CA: a member's (`server`: serving
    /// 127.0.0.1 and localhost, or only `hostName` when given, and client use for its
    /// peers) or a client's (no Common Name), valid from `validFrom` until `until` (in the
    /// past, for an expired one). Returns the two files' paths.
    @discardableResult
    public func issue(server: Bool, hostName: String? = nil, validFrom: Date, until: Date,
                      certificate: String, key: String) throws -> (certificate: String, key: String) {
        let subjectKey = P256.Signing.PrivateKey()
        let subject = try DistinguishedName {
            OrganizationName("Strata tests")
            if server { CommonName("etcd") }
        }
        let extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true, keyAgreement: true))
            try ExtendedKeyUsage(server ? [.serverAuth, .clientAuth] : [.clientAuth])
            if server {
                if let hostName {
                    SubjectAlternativeNames([.dnsName(hostName)])
                } else {
                    SubjectAlternativeNames([.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))])
                }
            }
        }
        let issued = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: Certificate.PublicKey(subjectKey.publicKey),
            notValidBefore: validFrom, notValidAfter: until, issuer: caName, subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256, extensions: extensions, issuerPrivateKey: Certificate.PrivateKey(caKey))
        try Self.write(issued.serializeAsPEM().pemString, to: certificate)
        try Self.write(subjectKey.pemRepresentation, to: key)
        return (certificate, key)
    }

    private static func write(_ text: String, to path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data((text + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
    }
}
