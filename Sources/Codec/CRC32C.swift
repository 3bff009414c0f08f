// CRC32C: the checksum of every WAL frame, segment header and page (FORMAT.md, "Checksums").
//
// Backed by the CPlatform C target: SSE4.2 / ARMv8 CRC instructions when the CPU has them
// (chosen once at run time), a slice-by-8 table otherwise. Thread-safe; no allocation.
import CStrataPlatform

/// CRC-32C (Castagnoli). `CRC32C.checksum("123456789".utf8) == 0xE306_9283`.
package enum CRC32C {
    /// The CRC-32C of `bytes`. O(n).
    @inlinable
    package static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        extend(0, bytes)
    }

    /// Continues a running CRC-32C `crc` (0 for none yet) over `bytes`. O(n).
    @inlinable
    package static func extend(_ crc: UInt32, _ bytes: some Sequence<UInt8>) -> UInt32 {
        if let result = bytes.withContiguousStorageIfAvailable({ extend(crc, UnsafeRawBufferPointer($0)) }) {
            return result
        }
        let array = Array(bytes)
        return array.withUnsafeBytes { extend(crc, $0) }
    }

    /// Continues a running CRC-32C over raw memory. O(n).
    package static func extend(_ crc: UInt32, _ buffer: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return crc }
        return cplatform_crc32c_extend(crc, base, buffer.count)
    }

    /// The portable software result, for testing the hardware path against it.
    package static func extendSoftware(_ crc: UInt32, _ buffer: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return crc }
        return cplatform_crc32c_extend_software(crc, base, buffer.count)
    }

    /// Whether this CPU computes CRC-32C in hardware.
    package static var isHardwareAccelerated: Bool { cplatform_crc32c_hardware_available() != 0 }
}
