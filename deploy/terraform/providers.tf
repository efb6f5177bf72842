# One kubernetes provider per region slot. Terraform needs provider aliases to be static, so the
# root module has a fixed number of slots (0..4); a region picks its slot in var.regions and
# keeps it for life. A slot no region uses configures nothing: no resource refers to it.
# To add slots, copy one provider block here and one module block in regions.tf, raise the
# limit in the regions validation (variables.tf), and add the alias to the tests' mock_provider
# list. deploy/terraform/hclcheck_test.go fails when these drift apart.
#
# The ledger gets its own alias, configured like the slot of var.ledger_region.

locals {
  no_kube = {
    config_path            = null
    context                = null
    host                   = null
    cluster_ca_certificate = null
    exec                   = null
  }
  kube_by_slot = { for name, r in var.regions : tostring(r.slot) => r.kube }
  kube = {
    for s in ["0", "1", "2", "3", "4", "ledger"] : s => (
      s == "ledger" ? var.regions[var.ledger_region].kube : lookup(local.kube_by_slot, s, local.no_kube)
    )
  }
}

provider "kubernetes" {
  alias                  = "slot0"
  load_config_file       = local.kube["0"].host == null
  config_path            = local.kube["0"].config_path
  config_context         = local.kube["0"].context
  host                   = local.kube["0"].host
  cluster_ca_certificate = local.kube["0"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["0"].exec == null ? [] : [local.kube["0"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "slot1"
  load_config_file       = local.kube["1"].host == null
  config_path            = local.kube["1"].config_path
  config_context         = local.kube["1"].context
  host                   = local.kube["1"].host
  cluster_ca_certificate = local.kube["1"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["1"].exec == null ? [] : [local.kube["1"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "slot2"
  load_config_file       = local.kube["2"].host == null
  config_path            = local.kube["2"].config_path
  config_context         = local.kube["2"].context
  host                   = local.kube["2"].host
  cluster_ca_certificate = local.kube["2"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["2"].exec == null ? [] : [local.kube["2"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "slot3"
  load_config_file       = local.kube["3"].host == null
  config_path            = local.kube["3"].config_path
  config_context         = local.kube["3"].context
  host                   = local.kube["3"].host
  cluster_ca_certificate = local.kube["3"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["3"].exec == null ? [] : [local.kube["3"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "slot4"
  load_config_file       = local.kube["4"].host == null
  config_path            = local.kube["4"].config_path
  config_context         = local.kube["4"].context
  host                   = local.kube["4"].host
  cluster_ca_certificate = local.kube["4"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["4"].exec == null ? [] : [local.kube["4"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}

provider "kubernetes" {
  alias                  = "ledger"
  load_config_file       = local.kube["ledger"].host == null
  config_path            = local.kube["ledger"].config_path
  config_context         = local.kube["ledger"].context
  host                   = local.kube["ledger"].host
  cluster_ca_certificate = local.kube["ledger"].cluster_ca_certificate

  dynamic "exec" {
    for_each = local.kube["ledger"].exec == null ? [] : [local.kube["ledger"].exec]
    content {
      api_version = exec.value.api_version
      command     = exec.value.command
      args        = exec.value.args
      env         = exec.value.env
    }
  }
}
