terraform {
  # 1.9: validation rules may refer to other variables (redis_passwords vs regions).
  required_version = ">= 1.9"

  required_providers {
    # Pinned to the 1.13 series: the HCL uses its block syntax (e.g. resources { limits { } }),
    # which 2.x changed, and 1.13.4 is the version validated offline by validate.sh.
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = "~> 1.13.4"
    }
  }
}
