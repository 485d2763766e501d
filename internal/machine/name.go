package machine

import (
	"fmt"

	"github.com/flotilla/flotilla/internal/limits"
)

// ValidateName checks a machine name: 1 to limits.MachineNameBytes (64)
// letters, digits, '.', '_' or '-', starting with a letter or digit. The
// same rule holds for --name, the machine an agent's Hello names and the
// machine of PATCH /v1/machines/{id}.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("machine name is empty")
	case len(name) > limits.MachineNameBytes:
		return fmt.Errorf("machine name %.20q... is %d bytes; the limit is %d", name, len(name), limits.MachineNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return fmt.Errorf("machine name %q: a machine name is letters, digits, '.', '_' or '-', starting with a letter or digit", name)
		}
	}
	return nil
}

// CheckMetadataPair checks the lengths of one metadata pair against
// limits.MetadataKeyBytes and limits.MetadataValueBytes. The syntax of
// keys and values is the unit package's (unit.ValidateMetadata).
func CheckMetadataPair(key, value string) error {
	if len(key) > limits.MetadataKeyBytes {
		return fmt.Errorf("metadata key %.20q... is %d bytes; the limit is %d", key, len(key), limits.MetadataKeyBytes)
	}
	if len(value) > limits.MetadataValueBytes {
		return fmt.Errorf("metadata value of %.40q is %d bytes; the limit is %d", key, len(value), limits.MetadataValueBytes)
	}
	return nil
}

// CheckMetadataCount checks a number of metadata pairs against
// limits.MetadataPairs.
func CheckMetadataCount(n int) error {
	if n > limits.MetadataPairs {
		return fmt.Errorf("%d metadata pairs; the limit is %d", n, limits.MetadataPairs)
	}
	return nil
}
