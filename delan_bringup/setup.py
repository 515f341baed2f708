from glob import glob

from setuptools import find_packages, setup

package_name = 'delan_bringup'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        ('share/' + package_name + '/launch', glob('launch/*.launch.py')),
        ('share/' + package_name + '/config', glob('config/*.yaml')),
        ('share/' + package_name + '/urdf', glob('urdf/*.urdf') + glob('urdf/*.xacro')),
    ],
    install_requires=['setuptools'],
    zip_safe=True,
    maintainer='delan_ros maintainers',
    maintainer_email='maintainers@delan-ros.invalid',
    description='Launch files, parameters, controller configs and URDFs of the delan_ros suite.',
    license='BSD-3-Clause',
    extras_require={'test': ['pytest']},
)
