"""The DWARF tag, attribute and form numbers the loader uses (DWARF 2-5)."""
from typing import Final

# Tags.
TAG_array_type: Final = 0x01
TAG_enumeration_type: Final = 0x04
TAG_formal_parameter: Final = 0x05
TAG_lexical_block: Final = 0x0b
TAG_member: Final = 0x0d
TAG_pointer_type: Final = 0x0f
TAG_compile_unit: Final = 0x11
TAG_structure_type: Final = 0x13
TAG_subroutine_type: Final = 0x15
TAG_typedef: Final = 0x16
TAG_union_type: Final = 0x17
TAG_unspecified_parameters: Final = 0x18
TAG_inlined_subroutine: Final = 0x1d
TAG_subrange_type: Final = 0x21
TAG_base_type: Final = 0x24
TAG_const_type: Final = 0x26
TAG_enumerator: Final = 0x28
TAG_subprogram: Final = 0x2e
TAG_variable: Final = 0x34
TAG_volatile_type: Final = 0x35
TAG_restrict_type: Final = 0x37
TAG_unspecified_type: Final = 0x3b
TAG_partial_unit: Final = 0x3c
TAG_atomic_type: Final = 0x47
TAG_class_type: Final = 0x02
TAG_LLVM_annotation: Final = 0x6000

# Attributes.
AT_sibling: Final = 0x01
AT_location: Final = 0x02
AT_name: Final = 0x03
AT_low_pc: Final = 0x11
AT_byte_size: Final = 0x0b
AT_bit_offset: Final = 0x0c
AT_bit_size: Final = 0x0d
AT_const_value: Final = 0x1c
AT_inline: Final = 0x20
AT_upper_bound: Final = 0x2f
AT_abstract_origin: Final = 0x31
AT_count: Final = 0x37
AT_data_member_location: Final = 0x38
AT_declaration: Final = 0x3c
AT_encoding: Final = 0x3e
AT_external: Final = 0x3f
AT_specification: Final = 0x47
AT_type: Final = 0x49
AT_data_bit_offset: Final = 0x6b
AT_str_offsets_base: Final = 0x72
AT_addr_base: Final = 0x73
AT_loclists_base: Final = 0x8c
AT_language: Final = 0x13

# Base type encodings.
ATE_boolean: Final = 0x02
ATE_complex_float: Final = 0x03
ATE_float: Final = 0x04
ATE_signed: Final = 0x05
ATE_signed_char: Final = 0x06
ATE_unsigned: Final = 0x07
ATE_unsigned_char: Final = 0x08

# Location operations.
OP_addr: Final = 0x03
OP_plus_uconst: Final = 0x23
OP_addrx: Final = 0xa1
OP_GNU_addr_index: Final = 0xfb
OP_reg0: Final = 0x50
OP_reg31: Final = 0x6f
OP_breg0: Final = 0x70
OP_breg31: Final = 0x8f
OP_lit0: Final = 0x30
OP_lit31: Final = 0x4f
OP_constu: Final = 0x10
OP_consts: Final = 0x11
OP_stack_value: Final = 0x9f
OP_entry_value: Final = 0xa3
OP_GNU_entry_value: Final = 0xf3
